"""The package's layers, checked on its import graph (read from the source, nothing run).

Data walks one way: targets -> collect -> model -> analysis -> views. The code inside ranks
imports nothing of the outside's. A cycle between modules is a layer that leaks.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "mldebug"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    """Modules of mldebug (and textual/rich/torch) a file imports, at any depth in it."""
    tree = ast.parse(path.read_text(), str(path))
    package = module_name(path).rsplit(".", 0 if path.name == "__init__.py" else 1)[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    edges = {}
    for name, path in modules.items():
        edges[name] = {m for m in imports_of(path) if m in modules and m != name}
    return edges


def imports_under(module: str, edges, prefixes) -> set[str]:
    return {m for m in edges[module] if m.startswith(prefixes)}


def layer(edges, prefix: str) -> list[str]:
    return [m for m in edges if m == prefix or m.startswith(prefix + ".")]


def test_collectors_never_import_the_analysis_or_the_views():
    edges = graph()
    for module in layer(edges, "mldebug.collect"):
        assert not imports_under(
            module, edges, ("mldebug.analysis", "mldebug.report", "mldebug.tui")
        ), module


def test_the_analysis_imports_only_the_model_and_itself():
    edges = graph()
    for module in layer(edges, "mldebug.analysis"):
        others = {
            m for m in edges[module] if not m.startswith(("mldebug.analysis", "mldebug.model"))
        }
        assert others <= {"mldebug.ranges", "mldebug.rankrules"}, (module, others)


def test_views_never_import_collectors_internals():
    edges = graph()
    for module in layer(edges, "mldebug.report") + layer(edges, "mldebug.tui"):
        assert not imports_under(module, edges, ("mldebug.collect.", "mldebug.launch")), module


def test_the_in_rank_side_imports_nothing_of_the_outside():
    edges = graph()
    for module in layer(edges, "mldebug.agent") + layer(edges, "mldebug.hooks"):
        outside = {m for m in edges[module] if not m.startswith(("mldebug.agent", "mldebug.hooks"))}
        assert outside <= {
            "mldebug.rundir",
            "mldebug.safeio",
            "mldebug.procfs",
            "mldebug.rankrules",
        }, (module, outside)
        source = (PACKAGE.parent / (module.replace(".", "/"))).with_suffix(".py")
        if not source.exists():
            source = PACKAGE.parent / module.replace(".", "/") / "__init__.py"
        assert not {"textual", "rich"} & {m.split(".")[0] for m in imports_of(source)}, module


def test_the_doctor_and_the_recipes_import_only_the_basics():
    # Checks of the machine and the guides: no analysis, no views, no torch in-process.
    edges = graph()
    basics = (
        "mldebug.doctor",
        "mldebug.recipes",
        "mldebug.rundir",
        "mldebug.safeio",
        "mldebug.procfs",
        "mldebug.textsafe",
    )
    for module in layer(edges, "mldebug.doctor") + layer(edges, "mldebug.recipes"):
        assert {m for m in edges[module] if not m.startswith(basics)} == set(), module
        source = PACKAGE.parent / module.replace(".", "/")
        source = source / "__init__.py" if source.is_dir() else source.with_suffix(".py")
        assert not {"textual", "rich", "torch"} & {m.split(".")[0] for m in imports_of(source)}


def test_the_tiny_models_import_nothing_else_of_mldebug():
    # A rank loads mldebug/tiny/ by path (agent/tinymodel.py): it must stand alone.
    edges = graph()
    for module in layer(edges, "mldebug.tiny"):
        outside = {m for m in edges[module] if not inside(m, "mldebug.tiny")}
        assert not outside, (module, outside)


def find_cycle(edges) -> list[str] | None:
    """One import cycle of `edges` (as a path that ends where it starts), or None."""
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


LAUNCHER = "mldebug.launch"


def inside(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def test_no_import_cycles_outside_the_launcher():
    # Cycles among the launcher's own modules are the next test's; any other is caught here.
    edges = {
        module: {m for m in targets if not (inside(module, LAUNCHER) and inside(m, LAUNCHER))}
        for module, targets in graph().items()
    }
    cycle = find_cycle(edges)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_no_import_cycles_in_the_launcher():
    edges = graph()
    launcher = {m: {t for t in edges[m] if inside(t, LAUNCHER)} for m in layer(edges, LAUNCHER)}
    cycle = find_cycle(launcher)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


@pytest.mark.parametrize(
    "module",
    [
        "mldebug.agent",
        "mldebug.rundir",
        "mldebug.rankrules",
        "mldebug.tiny",
    ],
)
def test_the_in_rank_modules_load_without_textual_rich_or_the_analysis(module):
    code = (
        f"import sys, {module}\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('textual', 'rich', 'torch')"
        " or m.startswith(('mldebug.analysis', 'mldebug.tui', 'mldebug.report'))]\n"
        "print(bad)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_multi_node_front_end_imports_no_views():
    # mldebug.cluster runs collect on nodes and merges their answers (an orchestrator, like
    # observe.py); what it makes is drawn by the views, which it never imports.
    edges = graph()
    for module in layer(edges, "mldebug.cluster"):
        assert not imports_under(module, edges, ("mldebug.report", "mldebug.tui")), module
    for module in layer(edges, "mldebug.collect") + layer(edges, "mldebug.analysis"):
        assert not imports_under(module, edges, ("mldebug.cluster",)), module


def test_the_nccl_readers_import_only_the_model_and_plain_helpers():
    # mldebug.nccl reads files and compares ranks: no views, no collectors, no launcher.
    edges = graph()
    allowed = {
        "mldebug",
        "mldebug.model",
        "mldebug.ranges",
        "mldebug.rundir",
        "mldebug.safeio",
        "mldebug.procfs",
        "mldebug.textsafe",
    }
    for module in layer(edges, "mldebug.nccl"):
        outside = {m for m in edges[module] if not m.startswith("mldebug.nccl")}
        assert outside <= allowed, (module, outside)


@pytest.mark.parametrize(
    "module", ["mldebug.collect.gdb", "mldebug.collect.gdbparse", "mldebug.collect.cores"]
)
def test_the_gdb_collectors_load_without_textual_rich_or_the_analysis(module):
    code = (
        f"import sys, {module}\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('textual', 'rich', 'torch')"
        " or m.startswith(('mldebug.analysis', 'mldebug.tui', 'mldebug.report'))]\n"
        "print(bad)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
