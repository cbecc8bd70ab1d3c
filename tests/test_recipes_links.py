"""Every recipe id mldebug can point a user to exists, and every finding kind points to one.

Read from the source (nothing run), so a finding or a kind added later, anywhere in the
package, is checked without this file changing: every `recipe=...` given to any call, every
module-level `RECIPE*` constant and the strings of `*RECIPE*` tables, and for every `KIND_*`
constant of mldebug/model/__init__.py, the `Finding(...)` calls that make it. A recipe given as an
expression the source does not spell out (`recipe=rule.recipe`) counts as given: its
strings are checked where they are written.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from mldebug import model
from mldebug.recipes import get_recipe, load_recipes

PACKAGE = Path(__file__).resolve().parent.parent / "mldebug"

# Informational kinds with nothing to do about them: the job is over.
NO_RECIPE_KINDS = {model.KIND_ENDED}


def sources():
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path, ast.parse(path.read_text(), str(path))


def module_constants(tree: ast.Module) -> dict[str, str]:
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for target in node.targets:
                if isinstance(target, ast.Name) and isinstance(node.value.value, str):
                    found[target.id] = node.value.value
    return found


def local_strings(function: ast.AST | None, name: str) -> set[str]:
    """String literals assigned to `name` inside `function`."""
    if function is None:
        return set()
    found = set()
    for node in ast.walk(function):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            found |= {
                n.value
                for n in ast.walk(node.value)
                if isinstance(n, ast.Constant) and isinstance(n.value, str)
            }
    return found


def strings_of(expr: ast.AST, constants: dict[str, str], function: ast.AST | None) -> set[str]:
    """The recipe ids an expression can give: its literals, the module constants and the
    local variables it names (None is not one)."""
    if isinstance(expr, ast.IfExp):  # the condition is not a value the recipe can take
        return strings_of(expr.body, constants, function) | strings_of(
            expr.orelse, constants, function
        )
    if isinstance(expr, (ast.Call, ast.Subscript)):  # computed: its arguments are not ids
        return set()
    found = set()
    for node in ast.walk(expr):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.add(node.value)
        elif isinstance(node, ast.Name):
            if node.id in constants:
                found.add(constants[node.id])
            else:
                found |= local_strings(function, node.id)
    return found


def is_dynamic(expr: ast.AST, constants: dict[str, str], function: ast.AST | None) -> bool:
    """An expression whose value the source does not spell out: an attribute (`cause.recipe`),
    a call, a lookup, or a name that is a parameter. Its strings are checked where they are
    written (module-level RECIPE* tables, recipe= literals elsewhere)."""
    if isinstance(expr, ast.IfExp):  # the condition is not a value the recipe can take
        return any(is_dynamic(e, constants, function) for e in (expr.body, expr.orelse))
    if isinstance(expr, ast.BoolOp):
        return any(is_dynamic(e, constants, function) for e in expr.values)
    if isinstance(expr, ast.Name):
        return expr.id not in constants and not local_strings(function, expr.id)
    return isinstance(expr, (ast.Attribute, ast.Call, ast.Subscript))


def recipe_tables(tree: ast.Module) -> list[tuple[str, str]]:
    """(name, value) for the strings of module-level tables whose name says RECIPE: the
    values of a dict, the items of a tuple, list or set."""
    found = []
    for node in tree.body:
        if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        names = [t.id for t in targets if isinstance(t, ast.Name) and "RECIPE" in t.id]
        if not names:
            continue
        values = node.value.values if isinstance(node.value, ast.Dict) else [node.value]
        if isinstance(node.value, (ast.Tuple, ast.List, ast.Set)):
            values = node.value.elts
        for value in values:
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                found.append((names[0], value.value))
    return found


def enclosing_functions(tree: ast.Module) -> dict[ast.AST, ast.AST]:
    parents = {}
    for function in ast.walk(tree):
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(function):
                parents.setdefault(node, function)
    return parents


def recipe_references():
    """(where, recipe id) for every recipe id the package can hand to a user."""
    for path, tree in sources():
        constants = module_constants(tree)
        functions = enclosing_functions(tree)
        where = path.relative_to(PACKAGE.parent)
        for name, value in constants.items():
            if name.startswith("RECIPE"):
                yield f"{where}: {name}", value
        for name, value in recipe_tables(tree):
            yield f"{where}: {name}", value
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                for keyword in node.keywords:
                    if keyword.arg == "recipe":
                        for value in strings_of(keyword.value, constants, functions.get(node)):
                            yield f"{where}:{node.lineno}", value


def finding_calls():
    """(kinds it can make, recipe ids it gives, where) for every Finding(...) call and every
    call of a helper that makes one."""
    kinds = {name: getattr(model, name) for name in dir(model) if name.startswith("KIND_")}
    for path, tree in sources():
        constants = module_constants(tree)
        functions = enclosing_functions(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            # Finding(...), or a helper that makes one, handed the kind first and the recipe
            # by name: _odd_out(KIND_NCCL_VERSION, ..., recipe=RECIPE_VERSION)
            maker = (
                node.args
                and isinstance(node.args[0], ast.Name)
                and node.args[0].id in kinds
                and any(k.arg == "recipe" for k in node.keywords)
            )
            if getattr(node.func, "id", "") != "Finding" and not maker:
                continue
            function = functions.get(node)
            kind_arg = node.args[0] if node.args else None
            kind_arg = next((k.value for k in node.keywords if k.arg == "kind"), kind_arg)
            if isinstance(kind_arg, ast.Name) and kind_arg.id in kinds:
                made = {kinds[kind_arg.id]}
            else:  # a variable: the kinds its function names
                made = {
                    kinds[n.id]
                    for n in ast.walk(function or node)
                    if isinstance(n, ast.Name) and n.id in kinds
                }
            recipe = next((k.value for k in node.keywords if k.arg == "recipe"), None)
            ids = strings_of(recipe, constants, function) if recipe is not None else set()
            dynamic = recipe is not None and is_dynamic(recipe, constants, function)
            yield made, ids, dynamic, f"{path.relative_to(PACKAGE.parent)}:{node.lineno}"


def test_every_recipe_id_in_the_source_exists():
    references = list(recipe_references())
    assert len(references) > 20  # the scan finds them (findings, launcher, timeouts)
    missing = [(where, rid) for where, rid in references if get_recipe(rid) is None]
    assert missing == []


def test_every_finding_kind_points_to_a_recipe():
    kinds = {getattr(model, name) for name in dir(model) if name.startswith("KIND_")}
    covered: dict[str, set[str]] = {}
    without = []
    dynamic_kinds: set[str] = set()
    for made, ids, dynamic, where in finding_calls():
        for kind in made:
            covered.setdefault(kind, set()).update(ids)
        if dynamic:
            dynamic_kinds |= made
        elif not ids and not made <= NO_RECIPE_KINDS:
            without.append((where, sorted(made)))
    assert without == [], "Finding(...) without a recipe"
    for kind in sorted(kinds - NO_RECIPE_KINDS):
        assert covered.get(kind) or kind in dynamic_kinds, f"no Finding of {kind!r} has a recipe"
        for recipe_id in covered[kind]:
            assert get_recipe(recipe_id) is not None, (kind, recipe_id)


def test_the_scan_follows_constants_and_local_variables():
    tree = ast.parse(
        "R = 'from-constant'\n"
        "def f(x):\n"
        "    recipe = 'one' if x else 'two'\n"
        "    return Finding(kind, (1,), 's', recipe=recipe if x else R)\n"
    )
    call = next(n for n in ast.walk(tree) if isinstance(n, ast.Call))
    expr = call.keywords[0].value
    found = strings_of(expr, module_constants(tree), enclosing_functions(tree)[call])
    assert found == {"one", "two", "from-constant"}


def test_the_scan_reads_recipe_tables_and_dynamic_recipes():
    tree = ast.parse(
        "KIND_RECIPES = {'a': 'one', 'b': 'two'}\n"
        "def f(rule, x):\n"
        "    return Finding(kind=KIND_X, recipe=rule.recipe)\n"
    )
    assert recipe_tables(tree) == [("KIND_RECIPES", "one"), ("KIND_RECIPES", "two")]
    call = next(n for n in ast.walk(tree) if isinstance(n, ast.Call))
    recipe = call.keywords[1].value
    assert is_dynamic(recipe, {}, enclosing_functions(tree)[call])
    assert not is_dynamic(ast.parse("'x' if y else None").body[0].value, {}, None)
    assert is_dynamic(ast.parse("'x' if y else table[k]").body[0].value, {}, None)


def test_the_readme_counts_the_recipes_the_command_lists():
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    said = re.search(r"\| (\d+) troubleshooting guides each finding points to", readme)
    assert said and int(said.group(1)) == len(load_recipes())
