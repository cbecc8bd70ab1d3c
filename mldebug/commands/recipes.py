"""`mldebug recipes [ID] [--search TEXT|-] [--json]`: the built-in troubleshooting recipes.

No ID: the list (id, title, one-line symptom). An ID: that recipe, as rich Markdown on a
terminal and as its plain Markdown text otherwise. --search: the recipes ranked by words or
by a whole pasted error message (`-` reads it from standard input, bounded).
"""

from __future__ import annotations

import argparse
import json
import sys

from mldebug.commands.common import add_json, command_parser, report_console, write_out
from mldebug.errors import EXIT_OK, MldebugError, NoTargetError
from mldebug.recipes import Recipe, get_recipe, load_recipes
from mldebug.recipes.search import MAX_QUERY_CHARS, search
from mldebug.textsafe import printable

EPILOG = """\
examples:
  mldebug recipes                          every recipe, one line each
  mldebug recipes cuda-oom                 read one
  mldebug recipes --search "watchdog timeout"
  mldebug recipes --search "$(tail -n 50 rank3.err)"
  some-command 2>&1 | mldebug recipes --search -

exit status:
  0    listed, printed, or searched (a search that finds nothing says so and exits 0)
  2    bad command line
  3    no recipe with that id (the known ids are listed)
"""


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser(
        "recipes", "Troubleshooting recipes that mldebug's findings point to.", EPILOG
    )
    parser.add_argument("id", nargs="?", help="recipe to print (omit to list them all)")
    parser.add_argument(
        "--search",
        metavar="TEXT",
        help="rank the recipes by these words or a pasted error message; - reads stdin",
    )
    add_json(parser, "print JSON")
    parser.add_argument(
        "--limit", type=int, default=5, metavar="N", help="search results shown (default 5)"
    )
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.search is not None:
        if args.id is not None:
            raise MldebugError("give a recipe id or --search, not both")
        return _search(_query(args.search), args.json, max(args.limit, 1))
    if args.id is None:
        return _list(args.json)
    recipe = get_recipe(args.id)
    if recipe is None:
        known = ", ".join(sorted(r.id for r in load_recipes()))
        raise NoTargetError(f"no recipe {printable(args.id)!r}", f"Known recipes: {known}")
    if args.json:
        write_out(json.dumps(_recipe_json(recipe) | {"body": recipe.body}, indent=2) + "\n")
    elif sys.stdout.isatty():
        from rich.markdown import Markdown

        report_console().print(Markdown(recipe.body))
    else:
        write_out(recipe.body.rstrip() + "\n")
    return EXIT_OK


def _query(text: str) -> str:
    if text != "-":
        return text
    if sys.stdin is None or sys.stdin.isatty():
        raise MldebugError("--search - reads the error text from standard input: pipe it in")
    return sys.stdin.read(MAX_QUERY_CHARS)


def _recipe_json(recipe: Recipe) -> dict:
    return {
        "id": recipe.id,
        "title": recipe.title,
        "symptom": recipe.symptom,
        "match": list(recipe.match),
        "related": list(recipe.related()),
    }


def _list(as_json: bool) -> int:
    recipes = sorted(load_recipes(), key=lambda recipe: recipe.id)
    if as_json:
        write_out(json.dumps({"recipes": [_recipe_json(r) for r in recipes]}, indent=2) + "\n")
        return EXIT_OK
    width = max(len(recipe.id) for recipe in recipes)
    lines = [f"{r.id:<{width}}  {r.title}\n{'':<{width}}  {r.symptom}" for r in recipes]
    write_out("\n".join(lines) + "\n\nRead one: mldebug recipes ID\n")
    return EXIT_OK


def _search(query: str, as_json: bool, limit: int) -> int:
    hits = search(query, limit=limit)
    if as_json:
        results = [
            {
                "id": hit.recipe.id,
                "title": hit.recipe.title,
                "score": hit.score,
                "matched": list(hit.matched),
                "terms": list(hit.terms),
            }
            for hit in hits
        ]
        write_out(json.dumps({"results": results}, indent=2) + "\n")
        return EXIT_OK
    if not hits:
        write_out("No recipe matches that text. List them all: mldebug recipes\n")
        return EXIT_OK
    width = max(len(hit.recipe.id) for hit in hits)
    lines = []
    for hit in hits:
        why = (
            "matched " + "; ".join(f'"{m}"' for m in hit.matched)
            if hit.matched
            else "words " + ", ".join(hit.terms)
        )
        lines.append(f"{hit.score:6.1f}  {hit.recipe.id:<{width}}  {hit.recipe.title}")
        lines.append(f"        {'':<{width}}  {printable(why)}")
    lines.append(f"\nRead the best one: mldebug recipes {hits[0].recipe.id}")
    write_out("\n".join(lines) + "\n")
    return EXIT_OK
