"""The package's layers, checked on its import graph (read from the source, nothing run).

Data walks one way: targets -> collect -> model -> analysis -> views. LAYERS below is the
whole table: every unit of the package (a subpackage, or a module at its top) has a row of
the units it may import. A new unit has no row and fails here until it gets one; a row is
checked on direct imports, NEVER on everything a unit reaches through others, and HEAVY on
the third-party libraries that come along. A cycle between modules is a layer that leaks.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from testkit.imports import HEAVY, PACKAGE, graph, heavy_of, reach, unit_of

# Plain helpers every outside layer may use: pure, standard library (and the model) only.
PLAIN = frozenset({"model", "ranges", "textsafe", "wording", "errors"})
# Safe access to a run directory and to /proc (mldebug/files/): standard library only, but
# files/wordblocks.py, which asks Hyperscan where it is installed (a big log's narrowed
# read: the front end's, never a rank's).
FILES = frozenset({"files"})
# The in-rank side: loaded inside every training process (the agent loads rankrules, the
# ledger's contract and files/ by path), so it imports nothing but each other and the
# standard library.
IN_RANK = frozenset({"agent", "hooks", "rankrules", "ledger.rules", "tiny"}) | FILES
# The collective ledger: its contract (in-rank) and the one comparer with its forms, words
# and the table from its verdict to a finding, which every source is adapted to.
LEDGER = frozenset({"ledger", "ledger.rules"})
ANY = None  # a front end: may import every unit

# unit -> the units it may import (besides itself). Keep it in the order data walks.
LAYERS: dict[str, frozenset[str] | None] = {
    # the package itself (mldebug.step(): import-light, loaded in ranks) and the helpers
    "mldebug": frozenset(),
    "errors": frozenset(),
    "model": frozenset(),
    "ranges": frozenset(),
    "textsafe": frozenset(),
    "wording": frozenset({"model", "ranges", "rankrules"}),
    # in-rank, standard library only
    "rankrules": frozenset(),
    "ledger.rules": frozenset(),
    "files": frozenset(),
    "hooks": frozenset(),
    "agent": frozenset({"rankrules", "ledger.rules"}) | FILES,  # by path, as _mldebug.<name>
    "tiny": frozenset(),  # loaded by path in ranks (agent/tinymodel.py): stands alone
    "demos": frozenset(),  # scripts `mldebug demo` runs as ranks
    # `mldebug check`'s rank program (torch inside) and its output format (preflight/wire.py,
    # stdlib only: the front end reads the lines with it)
    "preflight": frozenset(),
    # the ledger: compares, and says what each verdict is as a finding
    "ledger": frozenset({"ledger.rules", "model", "ranges", "wording"}),
    # targets -> collect -> analysis
    "targets": PLAIN | FILES | {"rankrules"},
    # collectors read; the readers of what they read (RAS's answer), never a verdict
    "collect": PLAIN | FILES | {"rankrules", "ledger.rules", "ras", "preflight"},
    "analysis": frozenset({"model", "ranges", "rankrules", "wording"}) | LEDGER,
    # the readers of NCCL and torch text and dumps, and their findings for the judge
    "flight": PLAIN | FILES | LEDGER,
    "ras": PLAIN | FILES | LEDGER | {"flight", "nccl"},  # nccl: its log prefixes and colours
    "nccl": PLAIN | FILES | LEDGER | {"flight", "ras"},
    # the orchestrators: collect, then hand every source's evidence to the judge
    "observe": PLAIN | FILES | {"collect", "analysis", "targets", "nccl"},
    "live": PLAIN | FILES | {"collect", "observe", "nccl", "explain", "targets"},
    "cluster": PLAIN | FILES | {"collect", "analysis", "observe", "targets", "ras"},
    # views: render what they are handed
    "report": PLAIN | {"rankrules", "nccl", "flight", "explain"},
    "tui": PLAIN | FILES | {"rankrules", "report", "recipes"},  # FILES: saved reports
    # beside the pipeline
    "recipes": frozenset({"textsafe"}) | FILES,
    "doctor": frozenset({"textsafe", "wording"}) | FILES,
    "explain": PLAIN
    | FILES
    | {"nccl", "flight", "ras", "analysis", "recipes", "rankrules", "traces"},
    # torch.profiler traces: read in bounded memory, lined up across ranks, as findings
    "traces": PLAIN | FILES,
    # the launcher, an orchestrator too: the hang watchdog looks at the job (observe), the
    # straggler line judges timing (analysis); it is handed the views' words, never renders
    "launch": PLAIN
    | FILES
    | LEDGER
    | {"rankrules", "collect", "observe", "analysis", "targets", "nccl"},
    # front ends
    "commands": ANY,
    "cli": frozenset({"commands", "errors", "textsafe"}),
    "__main__": frozenset({"cli"}),
}

VIEWS = frozenset({"report", "tui"})
COLLECTING = frozenset({"collect", "observe", "live", "launch", "cluster", "targets"})
FRONT = frozenset({"commands", "cli", "__main__"})
# unit -> units it must never reach, directly or through any other.
NEVER: dict[str, frozenset[str]] = {
    **{unit: frozenset(LAYERS) - IN_RANK for unit in IN_RANK},
    "analysis": COLLECTING
    | VIEWS
    | FRONT
    | {"nccl", "flight", "ras", "explain", "recipes", "doctor"},
    "model": frozenset(LAYERS) - {"model"},
    "wording": frozenset(LAYERS) - {"wording", "model", "ranges", "rankrules"},
    "ledger": COLLECTING | VIEWS | FRONT | {"analysis", "nccl", "flight", "ras", "explain"},
    "collect": VIEWS | FRONT | {"analysis", "observe", "live", "launch", "cluster", "explain"},
    "flight": VIEWS | COLLECTING | FRONT | {"analysis", "explain", "nccl"},
    "ras": VIEWS | COLLECTING | FRONT | {"analysis", "explain"},
    "nccl": VIEWS | COLLECTING | FRONT | {"analysis", "explain"},
    "report": COLLECTING | FRONT | {"analysis", "doctor"},
    "tui": COLLECTING | FRONT | {"analysis", "nccl", "flight", "ras", "explain", "doctor"},
    "recipes": COLLECTING | VIEWS | FRONT | {"analysis", "nccl"},
    "doctor": COLLECTING | VIEWS | FRONT | {"analysis", "nccl"},
    "explain": VIEWS - {"report"} | COLLECTING | FRONT,
    "traces": VIEWS | COLLECTING | FRONT | {"analysis", "explain", "nccl", "flight", "ras"},
    "cluster": VIEWS | FRONT,
    "observe": VIEWS | FRONT | {"live", "launch", "cluster"},
    # the launcher never renders: it is handed the views' words (LaunchSpec.render)
    "launch": VIEWS | FRONT,
    "preflight": frozenset(LAYERS) - {"preflight"},
}
# The modules that decide (compare, grade, make findings): the design's "collectors never
# judge" and "views never decide" are checked on them.
JUDGING = (
    "mldebug.analysis",
    "mldebug.ledger.compare",
    "mldebug.ledger.verdicts",
    "mldebug.flight.compare",
    "mldebug.ras.verdict",
    "mldebug.nccl.compare",
    "mldebug.nccl.compare_errors",
)
# Third-party libraries a unit may bring in (textual and rich draw; torch only in ranks'
# scripts; psutil reads processes). Checked on everything a unit reaches.
MAY_USE: dict[str, frozenset[str]] = {
    "tui": frozenset({"textual", "rich", "psutil"}),
    "report": frozenset({"rich"}),
    "commands": HEAVY - {"torch", "transformers"},
    "cli": HEAVY - {"torch", "transformers"},
    "__main__": HEAVY - {"torch", "transformers"},
    "targets": frozenset({"psutil"}),
    "collect": frozenset({"psutil"}),
    "observe": frozenset({"psutil"}),
    "live": frozenset({"psutil", "rich"}),  # rich: through report (nccl's text)
    "cluster": frozenset({"psutil"}),
    "launch": frozenset({"psutil", "rich"}),  # rich: the console's colours (launch/output.py)
    "explain": frozenset({"rich"}),
    "agent": frozenset({"pynvml"}),  # only when importable (GPU memory)
    "doctor": frozenset({"pynvml"}),
    "tiny": frozenset({"transformers", "torch"}),
    "demos": frozenset({"torch"}),
    "preflight": frozenset({"torch"}),
}


def judging(module: str) -> bool:
    return any(module == j or module.startswith(j + ".") for j in JUDGING)


def units() -> set[str]:
    return {unit_of(m) for m in graph()}


def test_every_unit_has_a_row_in_the_table():
    missing = sorted(units() - set(LAYERS))
    assert not missing, (
        f"mldebug/{missing[0]} has no row in LAYERS (tests/test_layers.py): add one that "
        "says which units it may import (and, in NEVER, what it must never reach)"
    )


def test_each_unit_imports_only_what_its_row_allows():
    wrong = []
    for module, targets in sorted(graph().items()):
        unit = unit_of(module)
        allowed = LAYERS.get(unit)
        if allowed is ANY:
            continue
        for target in sorted(targets):
            other = unit_of(target)
            if other not in (unit, "mldebug") and other not in allowed:
                wrong.append(f"{module} imports {target} ({unit} may not import {other})")
    assert not wrong, "\n".join(wrong)


def test_no_unit_reaches_what_it_must_never_reach_even_through_others():
    wrong = []
    for module in sorted(graph()):
        never = NEVER.get(unit_of(module), frozenset())
        bad = sorted(m for m in reach(module) if unit_of(m) in never)
        if bad:
            wrong.append(f"{module} reaches {bad[0]}" + (f" (+{len(bad) - 1})" if bad[1:] else ""))
    assert not wrong, "\n".join(wrong)


def test_heavy_libraries_come_only_where_they_may():
    wrong = []
    for module in sorted(graph()):
        allowed = MAY_USE.get(unit_of(module), frozenset())
        for other in sorted({module} | reach(module)):
            extra = heavy_of(other) - allowed
            if extra:
                via = "" if other == module else f" through {other}"
                wrong.append(f"{module} brings in {sorted(extra)}{via}")
                break
    assert not wrong, "\n".join(wrong)


def test_collectors_never_judge():
    # What reads a process or a file hands back what it read; the analysis decides.
    wrong = [
        f"{module} reaches {sorted(filter(judging, reach(module)))[0]}"
        for module in sorted(graph())
        if unit_of(module) == "collect" and any(judging(m) for m in reach(module))
    ]
    assert not wrong, "\n".join(wrong)


def test_views_never_decide():
    # A view renders the verdict it is handed: it imports no module that compares, grades
    # or makes findings, and never reaches the analysis.
    wrong = []
    for module, targets in sorted(graph().items()):
        if unit_of(module) not in VIEWS:
            continue
        wrong += [f"{module} imports {t}" for t in sorted(targets) if judging(t)]
        wrong += [
            f"{module} reaches {m}" for m in sorted(reach(module)) if inside(m, "mldebug.analysis")
        ]
    assert not wrong, "\n".join(wrong)


def test_at_most_eight_loose_modules_at_the_top():
    # The tree reads like the architecture: modules live in the package of their role.
    top = sorted(
        p.name
        for p in PACKAGE.glob("*.py")
        if p.name not in ("__init__.py", "__main__.py", "cli.py")
    )
    assert len(top) <= 8, top


def test_the_table_names_only_units_that_exist_or_are_foreseen():
    # A row may come before its unit's code does.
    foreseen = {"explain"}
    named = set(LAYERS) | {u for row in LAYERS.values() if row for u in row}
    assert named - units() <= foreseen, sorted(named - units() - foreseen)


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
    launcher = {
        m: {t for t in edges[m] if inside(t, LAUNCHER)} for m in edges if inside(m, LAUNCHER)
    }
    cycle = find_cycle(launcher)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


@pytest.mark.parametrize(
    "module",
    [
        "mldebug.agent",
        "mldebug.files.rundir",
        "mldebug.files.safeio",
        "mldebug.files.procfs",
        "mldebug.rankrules",
        "mldebug.tiny",
        "mldebug.collect.gdb",
        "mldebug.collect.gdbparse",
        "mldebug.collect.cores",
    ],
)
def test_these_modules_load_without_textual_rich_torch_or_the_analysis(module):
    # What runs in ranks, and the gdb collectors, as a fresh interpreter really loads them.
    code = (
        f"import sys, {module}\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('textual', 'rich', 'torch')"
        " or m.startswith(('mldebug.analysis', 'mldebug.tui', 'mldebug.report'))]\n"
        "print(bad)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
