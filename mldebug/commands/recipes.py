"""`mldebug recipes [ID]`: list the built-in troubleshooting recipes, or print one."""

from __future__ import annotations

import argparse

from mldebug.commands.common import Parser
from mldebug.errors import NoTargetError
from mldebug.recipes import get_recipe, load_recipes


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="mldebug recipes",
        description="Troubleshooting recipes that mldebug's findings point to.",
    )
    parser.add_argument("id", nargs="?", help="recipe to print (omit to list them all)")
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.id is None:
        recipes = load_recipes()
        width = max(len(recipe.id) for recipe in recipes)
        for recipe in recipes:
            print(f"{recipe.id:<{width}}  {recipe.title}")
        return 0
    recipe = get_recipe(args.id)
    if recipe is None:
        known = ", ".join(r.id for r in load_recipes())
        raise NoTargetError(f"no recipe {args.id!r}", f"Known recipes: {known}")
    print(recipe.body.rstrip())
    return 0
