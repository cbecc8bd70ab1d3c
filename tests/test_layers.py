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
from testkit.imports import HEAVY, graph, heavy_of, reach, unit_of

# Plain helpers every outside layer may use: pure, standard library (and the model) only.
PLAIN = frozenset(
    {"model", "model_timing", "model_check", "ranges", "textsafe", "wording", "errors"}
)
# Safe access to a run directory and to /proc: standard library only.
RUNDIR = frozenset({"rundir", "safeio", "procfs"})
# The in-rank side: loaded inside every training process (the agent loads the top-level
# ones by path), so it imports nothing but each other and the standard library. The
# collective ledger's contract module, next to rankrules.py, belongs here too.
IN_RANK = frozenset({"agent", "hooks", "rankrules", "ledgerrules", "tiny"}) | RUNDIR
# The collective ledger: its contract (ledgerrules, in-rank) and the one comparer with its
# forms and sentences, which every source of collective progress is adapted to.
LEDGER = frozenset(
    {"ledger", "ledgerarrival", "ledgerforms", "ledgerrules", "ledgerverdicts", "ledgerwords"}
)
ANY = None  # a front end: may import every unit

# unit -> the units it may import (besides itself). Keep it in the order data walks.
LAYERS: dict[str, frozenset[str] | None] = {
    # the package itself (mldebug.step(): import-light, loaded in ranks) and the helpers
    "mldebug": frozenset(),
    "errors": frozenset(),
    "model": frozenset({"model_timing"}),
    "model_timing": frozenset(),  # the timing dataclasses of slow jobs, part of the model
    "model_check": frozenset({"model"}),  # what `mldebug check` measured, and its verdict
    "ranges": frozenset(),
    "textsafe": frozenset(),
    "wording": frozenset({"model", "ranges", "rankrules"}),
    # in-rank, standard library only
    "rankrules": frozenset(),
    "ledgerrules": frozenset(),
    "ledgerforms": frozenset({"ledgerrules"}),
    "ledgerwords": frozenset({"ledgerforms", "ledgerrules", "ranges", "wording"}),
    "ledgerarrival": frozenset({"ledgerforms"}),
    # the one table from a ledger verdict to a finding's kind, severity and recipe
    "ledgerverdicts": frozenset({"ledgerrules", "model", "model_timing"}),
    "ledger": frozenset(
        {"ledgerarrival", "ledgerforms", "ledgerrules", "ledgerwords", "ranges", "wording"}
    ),
    "safeio": frozenset(),
    "procfs": frozenset(),
    "rundir": frozenset({"safeio", "procfs"}),
    "hooks": frozenset(),
    "agent": frozenset({"rankrules", "ledgerrules"}) | RUNDIR,  # by path, as _mldebug.<name>
    "tiny": frozenset(),  # loaded by path in ranks (agent/tinymodel.py): stands alone
    "demos": frozenset(),  # scripts `mldebug demo` runs as ranks
    "checkwire": frozenset(),  # the output format of `mldebug check`'s rank program
    "preflight": frozenset({"checkwire"}),  # `mldebug check`'s rank program (torch inside)
    # targets -> collect -> analysis
    "targets": PLAIN | RUNDIR | {"rankrules"},
    # collect: nccl for its pure readers only (the RAS client parses the answer it read)
    "collect": PLAIN | RUNDIR | {"rankrules", "ledgerrules", "nccl", "checkwire"},
    "analysis": frozenset(
        {"model", "model_timing", "model_check", "ranges", "rankrules", "wording"}
    )
    | LEDGER,
    "nccl": PLAIN | RUNDIR | LEDGER,  # reads NCCL/torch text and dumps into findings of its own
    # the orchestrators: collect, then analyse
    "observe": PLAIN | RUNDIR | {"collect", "analysis", "targets"},
    # one look at a job as `dump --run` and the hang watchdog take it
    "look": PLAIN | RUNDIR | {"observe", "analysis", "nccl", "targets"},
    "live": PLAIN | RUNDIR | {"collect", "observe", "nccl", "explain", "targets"},
    "cluster": PLAIN | RUNDIR | {"collect", "analysis", "observe", "targets", "nccl"},
    # views: render what they are handed
    "report": PLAIN | {"rankrules", "nccl", "explain"},  # renders nccl's Scan, explain's findings
    "tui": PLAIN | RUNDIR | {"rankrules", "report", "recipes"},  # RUNDIR: saved reports
    # beside the pipeline
    "recipes": frozenset({"textsafe"}) | RUNDIR,
    "doctor": frozenset({"textsafe", "wording"}) | RUNDIR,
    "explain": PLAIN | RUNDIR | {"nccl", "analysis", "recipes", "rankrules"},
    # the launcher, an orchestrator too: the hang watchdog looks at the job (look), learns
    # its quiet phases and the straggler line judges timing (analysis), writes its report
    "launch": PLAIN
    | RUNDIR
    | LEDGER
    | {"rankrules", "collect", "observe", "look", "analysis", "targets", "nccl"},
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
    "analysis": COLLECTING | VIEWS | FRONT | {"nccl", "explain", "recipes", "doctor"},
    "model": frozenset(LAYERS) - {"model", "model_timing"},
    "model_timing": frozenset(LAYERS) - {"model_timing"},
    "model_check": frozenset(LAYERS) - {"model_check", "model", "model_timing"},
    "checkwire": frozenset(LAYERS) - {"checkwire"},
    "wording": frozenset(LAYERS) - {"wording", "model", "model_timing", "ranges", "rankrules"},
    "collect": VIEWS | FRONT | {"analysis", "observe", "live", "launch", "cluster", "explain"},
    "nccl": VIEWS | COLLECTING | FRONT | {"analysis", "explain"},
    "report": COLLECTING | FRONT | {"analysis", "doctor"},
    "tui": COLLECTING | FRONT | {"analysis", "nccl", "explain", "doctor"},
    "recipes": COLLECTING | VIEWS | FRONT | {"analysis", "nccl"},
    "doctor": COLLECTING | VIEWS | FRONT | {"analysis", "nccl"},
    "explain": VIEWS - {"report"} | COLLECTING | FRONT,
    "cluster": VIEWS | FRONT,
    "observe": VIEWS | FRONT | {"live", "launch", "cluster"},
    # the launcher never renders: it is handed the views' words (LaunchSpec.render)
    "launch": VIEWS | FRONT,
}
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
    "look": frozenset({"psutil"}),
    "live": frozenset({"psutil", "rich"}),  # rich: through report (nccl's text)
    "cluster": frozenset({"psutil"}),
    "launch": frozenset({"psutil", "rich"}),  # rich: the watchdog's text report
    "explain": frozenset({"rich"}),
    "agent": frozenset({"pynvml"}),  # only when importable (GPU memory)
    "doctor": frozenset({"pynvml"}),
    "tiny": frozenset({"transformers", "torch"}),
    "demos": frozenset({"torch"}),
    "preflight": frozenset({"torch"}),
}


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


def test_the_table_names_only_units_that_exist_or_are_foreseen():
    # Rows for units other developers add (explain) may come before their code does.
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
        "mldebug.rundir",
        "mldebug.safeio",
        "mldebug.procfs",
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
