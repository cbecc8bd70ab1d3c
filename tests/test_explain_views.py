"""The live view uses explain's readers too: on a log pasted into the Recipes search, the
recipe of what explain is sure of goes first, before the words' own ranking (`mldebug
attach` hands the app `sure_recipes`); the NCCL tab adds what explain is sure the NCCL
logs' tails say (read by the run-files reader, off the UI thread)."""

from __future__ import annotations

from pathlib import Path

from mldebug.explain.engine import sure_recipes
from mldebug.live.runfiles import explained_nccl
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
    assert ranked(paste, load_recipes(), sure_recipes)[0].id == "mismatched-collectives"


def test_typed_words_rank_as_before():
    recipes = load_recipes()
    assert [r.id for r in ranked("watchdog timeout", recipes, sure_recipes)][:1] == [
        "nccl-watchdog-timeout"
    ]
    assert ranked("", recipes) == list(recipes)


def test_the_nccl_tab_shows_what_explain_reads_in_the_nccl_logs():
    from mldebug.model import RunFiles
    from mldebug.tui.widgets.nccl_view import report_text

    # GIVEN a run whose NCCL log bootstraps over docker0 and fails to connect
    lines = tuple((CORPUS / "nccl_bootstrap_docker0.log").read_text().splitlines())
    nccl = (("gpu-n03.20117.log", lines),)
    files = RunFiles(
        "/tmp/run", nccl=nccl, nccl_findings=explained_nccl(nccl, ()), nccl_summary=("rank 0",)
    )
    # THEN the NCCL tab names the interface and its recipe
    text = report_text(files).plain
    assert "NCCL uses docker0 (a container bridge or tunnel)" in text
    assert "recipe: network-interface" in text


def test_the_nccl_tab_adds_nothing_to_a_healthy_log():
    from mldebug.model import RunFiles
    from mldebug.tui.widgets.nccl_view import NOTHING_FOUND, report_text

    lines = (
        "node-a:4100:4100 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.5<0>",
        "node-a:4100:4177 [0] NCCL INFO comm 0x55d1 rank 0 nranks 2 cudaDev 0 busId 18000 - Init COMPLETE",
    )
    nccl = (("node-a.4100.log", lines),)
    files = RunFiles(
        "/tmp/run", nccl=nccl, nccl_findings=explained_nccl(nccl, ()), nccl_summary=("rank 0",)
    )
    assert report_text(files).plain.startswith(NOTHING_FOUND)
