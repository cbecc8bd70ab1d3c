"""Recipes: the troubleshooting guides shipped with mldebug, listed and read as Markdown."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Markdown, OptionList
from textual.widgets.option_list import Option


def load_all():
    """The shipped recipes; an empty list (and a reason) when they cannot be loaded."""
    try:
        from mldebug.recipes import load_recipes

        return load_recipes(), ""
    except Exception as error:  # a broken recipe file must not take the live view down
        return [], f"Recipes could not be loaded: {error}"


class RecipesView(Horizontal):
    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.recipes, self.problem = load_all()
        self.current: str | None = None

    def compose(self) -> ComposeResult:
        yield OptionList(
            *(Option(recipe.title, id=recipe.id) for recipe in self.recipes), id="recipe-list"
        )
        with VerticalScroll(id="recipe-scroll"):
            yield Markdown(self.problem or "Select a recipe.", id="recipe-body")

    def on_mount(self) -> None:
        if self.recipes and self.current is None:
            self.open(self.recipes[0].id)

    def open(self, recipe_id: str) -> bool:
        for index, recipe in enumerate(self.recipes):
            if recipe.id == recipe_id:
                self.current = recipe.id
                self.query_one("#recipe-list", OptionList).highlighted = index
                self.query_one("#recipe-body", Markdown).update(recipe.body)
                self.query_one("#recipe-scroll", VerticalScroll).scroll_home(animate=False)
                return True
        return False

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        # A highlight queued before open() moved the list is stale: the list says what is current.
        stale = event.option_index != event.option_list.highlighted
        if event.option.id and event.option.id != self.current and not stale:
            self.open(event.option.id)
