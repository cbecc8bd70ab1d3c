"""Built-in troubleshooting recipes: Markdown files with a small front matter.

    ---
    id: collective-hang
    title: Every rank waits in the same collective
    symptom: one line a user would recognise
    ---
    Markdown body...

Front matter is `key: value` lines only (no YAML dependency). Every finding names a recipe id.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources


@dataclass(frozen=True)
class Recipe:
    id: str
    title: str
    symptom: str
    body: str  # Markdown


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
    return Recipe(
        id=recipe_id,
        title=meta.get("title") or recipe_id,
        symptom=meta.get("symptom", ""),
        body=body,
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
