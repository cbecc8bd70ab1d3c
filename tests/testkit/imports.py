"""mldebug's import graph, read from the source (nothing imported): which module imports
which, at any depth in a file (lazy imports in functions count), and what each reaches.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent.parent / "mldebug"
# Third-party libraries worth knowing a module brings in.
HEAVY = frozenset({"textual", "rich", "torch", "transformers", "psutil", "pynvml"})


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


# Modules that are a unit of their own inside their package: the ledger's contract is
# loaded inside every rank, the rest of the ledger is not.
OWN_UNITS = ("ledger.rules",)


def unit_of(module: str) -> str:
    """The unit a module belongs to: mldebug.collect.gdb -> "collect", mldebug -> "mldebug",
    mldebug.ledger.rules -> "ledger.rules"."""
    parts = module.split(".")
    inner = ".".join(parts[1:3])
    if inner in OWN_UNITS:
        return inner
    return parts[1] if len(parts) > 1 else parts[0]


def imports_of(path: Path) -> set[str]:
    """Modules a file imports, at any depth in it (lazy imports in functions count)."""
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


@cache
def sources() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py")}


@cache
def graph() -> dict[str, frozenset[str]]:
    """module -> the modules of mldebug it imports."""
    modules = sources()
    return {
        name: frozenset(m for m in imports_of(path) if m in modules and m != name)
        for name, path in modules.items()
    }


@cache
def heavy_of(module: str) -> frozenset[str]:
    """The third-party HEAVY libraries a module imports itself."""
    return frozenset(m.split(".")[0] for m in imports_of(sources()[module])) & HEAVY


def reach(module: str) -> set[str]:
    """Every module of mldebug `module` imports, directly or through others."""
    edges, seen, todo = graph(), set(), [module]
    while todo:
        for nxt in edges[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen
