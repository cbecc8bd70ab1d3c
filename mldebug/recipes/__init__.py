"""Built-in troubleshooting recipes: Markdown files with a small front matter.

    ---
    id: collective-hang
    title: Every rank waits in the same collective
    symptom: one line a user would recognise
    match: literal error text | another one | ...
    ---
    # Title
    ## Symptoms
    ## Confirm with mldebug
    ## Likely causes
    ## Fixes
    ## Related

Front matter is `key: value` lines only (no YAML dependency). `match` lists, separated by
`|`, the literal strings people see in their logs; search (search.py) weighs them most.
Every finding names a recipe id.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

# The sections every shipped recipe has, in this order (tests/test_recipes.py checks it).
SECTIONS = ("Symptoms", "Confirm with mldebug", "Likely causes", "Fixes", "Related")

_RECIPE_ID = re.compile(r"`([a-z0-9]+(?:-[a-z0-9]+)+)`")


@dataclass(frozen=True)
class Recipe:
    id: str
    title: str
    symptom: str
    body: str  # Markdown
    match: tuple[str, ...] = ()  # literal error strings and keywords that point here

    def sections(self) -> dict[str, str]:
        """The body's `## ` sections by heading, each with its text."""
        found: dict[str, str] = {}
        heading = None
        for line in self.body.splitlines():
            if line.startswith("## "):
                heading = line[3:].strip()
                found[heading] = ""
            elif heading is not None:
                found[heading] += line + "\n"
        return {name: text.strip() for name, text in found.items()}

    def related(self) -> tuple[str, ...]:
        """The recipe ids the Related section names (in backticks)."""
        return tuple(_RECIPE_ID.findall(self.sections().get("Related", "")))


def parse_recipe(text: str, fallback_id: str = "") -> Recipe:
    """Read one recipe file; a file without front matter is all body."""
    meta: dict[str, str] = {}
    body = text
    lines = text.splitlines()
    if lines and lines[0].strip() == "---":
        for index, line in enumerate(lines[1:], start=1):
            if line.strip() == "---":
                body = "\n".join(lines[index + 1 :]).lstrip("\n")
                break
            key, sep, value = line.partition(":")
            if sep:
                meta[key.strip().lower()] = value.strip()
        else:
            meta = {}  # unterminated front matter: treat the file as plain Markdown
    recipe_id = meta.get("id") or fallback_id
    match = tuple(part.strip() for part in meta.get("match", "").split("|") if part.strip())
    return Recipe(
        id=recipe_id,
        title=meta.get("title") or recipe_id,
        symptom=meta.get("symptom", ""),
        body=body,
        match=match,
    )


@lru_cache(maxsize=1)
def load_recipes() -> tuple[Recipe, ...]:
    """All shipped recipes, sorted by title."""
    found = []
    for entry in resources.files(__package__).iterdir():
        if entry.name.endswith(".md") and entry.name != "README.md":
            found.append(parse_recipe(entry.read_text(encoding="utf-8"), entry.name[:-3]))
    return tuple(sorted(found, key=lambda recipe: recipe.title.lower()))


def get_recipe(recipe_id: str) -> Recipe | None:
    for recipe in load_recipes():
        if recipe.id == recipe_id:
            return recipe
    return None
