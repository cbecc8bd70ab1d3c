"""Recipes: the troubleshooting guides shipped with mldebug, listed and read as Markdown.

The box above the list searches them (`mldebug recipes --search`): type words or paste an
error line, and the list shows the matching recipes best first, the best one opened.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.timer import Timer
from textual.widgets import Input, Markdown, OptionList

if TYPE_CHECKING:
    from mldebug.recipes import Recipe
from textual.widgets.option_list import Option

RELEVANT = 0.2  # a recipe is listed when it scores at least this share of the best one
# Typing or a paste is searched once the box has been still this long, and off the screen's
# thread: reading a long pasted log takes a while, and a key must never wait for it.
SETTLE_S = 0.2


def load_all() -> tuple[Sequence[Recipe], str]:
    """The shipped recipes; an empty list (and a reason) when they cannot be loaded."""
    try:
        from mldebug.recipes import load_recipes

        return load_recipes(), ""
    except Exception as error:  # a broken recipe file must not take the live view down
        return [], f"Recipes could not be loaded: {error}"


def ranked(
    query: str, recipes: Iterable[Recipe], read_paste: Callable[[str], list[str]] | None = None
) -> list[Recipe]:
    """The recipes that match `query`, best first; all of them for an empty query.
    `read_paste`: the recipes of what a reader of logs is sure a paste says (mldebug
    explain's, handed in by `mldebug attach`), put first."""
    if not query.strip():
        return list(recipes)
    from mldebug.recipes.search import search

    hits = search(query)
    # Weak matches (a common word or two) only bury the ones that answer the text.
    found = [hit.recipe for hit in hits if hit.score >= hits[0].score * RELEVANT] if hits else []
    # A pasted log: what `mldebug explain` is sure it says goes first.
    by_id = {recipe.id: recipe for recipe in recipes}
    sure = [rid for rid in (read_paste(query) if read_paste else ()) if rid in by_id]
    first = [by_id[rid] for rid in dict.fromkeys(sure)]
    return first + [recipe for recipe in found if recipe not in first]


class RecipesView(Horizontal):
    BINDINGS = [
        Binding("slash", "search", "Search recipes"),
        Binding("escape", "leave_search", "Back to the list", show=False),
    ]

    def __init__(self, read_paste: Callable[[str], list[str]] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.read_paste = read_paste
        self.all_recipes, self.problem = load_all()
        self.recipes = list(self.all_recipes)  # what the list shows now
        self.current: str | None = None
        # The body is drawn by one loop at a time: Markdown.update() picks the blocks to
        # remove when called, so overlapping updates (typing in the search box) would stack
        # documents. The loop redraws until what is shown is what was last asked for.
        self._wanted = ""
        self._shown: str | None = None
        self._drawing = False
        self._query = ""  # what the box says now; a search for older text is dropped
        self._timer: Timer | None = None
        self._searches = 0  # searches asked for and not yet shown

    @property
    def searching(self) -> bool:
        """A search is waiting for the box to settle, or running."""
        return self._searches > 0

    def compose(self) -> ComposeResult:
        with Vertical(id="recipe-side"):
            yield Input(placeholder="search: words or an error line", id="recipe-search")
            yield OptionList(*self._options(), id="recipe-list")
        with VerticalScroll(id="recipe-scroll"):
            yield Markdown(self.problem or "Select a recipe.", id="recipe-body")

    def _options(self) -> list[Option]:
        return [Option(recipe.title, id=recipe.id) for recipe in self.recipes]

    def on_mount(self) -> None:
        if self.recipes and self.current is None:
            self.open(self.recipes[0].id)

    def show(self, recipes: Iterable[Recipe]) -> None:
        """Put these recipes in the list (a search's result, or all of them)."""
        self.recipes = list(recipes)
        listing = self.query_one("#recipe-list", OptionList)
        listing.clear_options()
        listing.add_options(self._options())

    def open(self, recipe_id: str) -> bool:
        if recipe_id not in {r.id for r in self.recipes}:
            if recipe_id not in {r.id for r in self.all_recipes}:
                return False
            # A finding's recipe that the current search hides: show the whole list again.
            self.query_one("#recipe-search", Input).value = ""
            self.show(self.all_recipes)
        for index, recipe in enumerate(self.recipes):
            if recipe.id == recipe_id:
                self.current = recipe.id
                self.query_one("#recipe-list", OptionList).highlighted = index
                self._draw(recipe.body)
                return True
        return False

    def action_search(self) -> None:
        self.query_one("#recipe-search", Input).focus()

    def action_leave_search(self) -> None:
        self.query_one("#recipe-list", OptionList).focus()

    def _draw(self, body: str) -> None:
        self._wanted = body
        if not self._drawing:
            self._drawing = True
            self.run_worker(self._draw_loop(), group="recipe-body")

    async def _draw_loop(self) -> None:
        try:
            while self._shown != self._wanted:
                body = self._wanted
                await self.query_one("#recipe-body", Markdown).update(body)
                self._shown = body
                self.query_one("#recipe-scroll", VerticalScroll).scroll_home(animate=False)
        finally:
            self._drawing = False

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id != "recipe-search":
            return
        event.stop()
        self._query = event.value
        if self._timer is not None:
            self._timer.stop()
            self._searches -= 1
        self._searches += 1
        self._timer = self.set_timer(SETTLE_S, self._search)

    def _search(self) -> None:
        self._timer = None
        self.run_worker(self._search_for(self._query), group="recipe-search")

    async def _search_for(self, query: str) -> None:
        try:
            found = await asyncio.to_thread(ranked, query, self.all_recipes, self.read_paste)
            if query == self._query:  # else the user typed on: a newer search will show
                self._show_found(query, found)
        finally:
            self._searches -= 1

    def _show_found(self, query: str, found: list) -> None:
        self.show(found)
        if not query.strip() and found:
            # The box was cleared: the whole list, the same recipe open (or the first).
            self.open(self.current or found[0].id)
        elif found:
            self.open(found[0].id)
        else:
            self.current = None
            self._draw("No recipe matches that text. Clear the box to see them all.")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "recipe-search":
            event.stop()
            self.query_one("#recipe-list", OptionList).focus()

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        # A highlight queued before open() moved the list is stale: the list says what is current.
        # So is one from a list a search has replaced since: the option there now differs.
        listing = event.option_list
        index = listing.highlighted
        now = listing.get_option_at_index(index).id if index is not None else None
        stale = event.option_index != index or now != event.option.id
        if event.option.id and event.option.id != self.current and not stale:
            self.open(event.option.id)
