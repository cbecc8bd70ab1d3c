"""The TUI's Recipes search runs explain's readers too: on a pasted log, the recipe of
what explain is sure of goes first, before the words' own ranking."""

from __future__ import annotations

from pathlib import Path

from mldebug.recipes import load_recipes
from mldebug.recipes.search import search
from mldebug.tui.widgets.recipes_view import ranked

CORPUS = Path(__file__).resolve().parent / "data" / "explain"


def test_a_pasted_log_opens_the_recipe_explain_is_sure_of():
    # GIVEN ranks timing out at SeqNums tens of thousands apart
    paste = (CORPUS / "seq_spread_rank7.log").read_text()
    # the words alone point at the watchdog's recipe
    assert search(paste)[0].recipe.id == "nccl-watchdog-timeout"
    # WHEN it is pasted into the search box, THEN explain's reading comes first
    assert ranked(paste, load_recipes())[0].id == "mismatched-collectives"


def test_typed_words_rank_as_before():
    recipes = load_recipes()
    assert [r.id for r in ranked("watchdog timeout", recipes)][:1] == ["nccl-watchdog-timeout"]
    assert ranked("", recipes) == list(recipes)
