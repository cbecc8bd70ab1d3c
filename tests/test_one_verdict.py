"""One verdict: every front end asks the one judge (analysis/judge.py), once per look, and
code reads a finding's fields, never its words.

The judge is counted where every front end reaches it: `analysis.snapshot.judged` (a look
at live ranks, local or merged from nodes) and `analysis.judge.judge` for the others. The
ranks are the sleepy job's plain Python processes (no torch): the point is the path, not
what the job does.
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest
from testkit.procs import sleepy_ranks

import mldebug
import mldebug.analysis.judge as judge_module
import mldebug.analysis.snapshot as snapshot_module
from mldebug.analysis.judge import Evidence, judge, merge_same
from mldebug.cli import main
from mldebug.model import (
    KIND_OUTLIER,
    SEVERITY_ERROR,
    SEVERITY_WARNING,
    SOURCE_AGENT,
    SOURCE_FLIGHT,
    CollectiveRef,
    Finding,
)

PACKAGE = Path(mldebug.__file__).parent
VIEWS = ("report", "tui")
DATA = Path(__file__).parent / "data"


def summary_reads(path: Path) -> list[str]:
    """`x.summary` read as a value in a module (a class's own `self.summary`, and calling a
    method named summary, are not a finding's words)."""
    tree = ast.parse(path.read_text(), str(path))
    calls = {id(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call)}
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr == "summary"
            and isinstance(node.ctx, ast.Load)
            and id(node) not in calls
            and not (isinstance(node.value, ast.Name) and node.value.id == "self")
        ):
            found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    return found


def test_no_module_outside_the_views_reads_a_findings_summary():
    # The words are for people: ranking, merging and de-duplicating read fields.
    reads = []
    for path in sorted(PACKAGE.rglob("*.py")):
        part = path.relative_to(PACKAGE).parts[0]
        if part in VIEWS or path.relative_to(PACKAGE).as_posix() == "wording.py":
            continue
        reads += summary_reads(path)
    assert not reads, reads


def test_the_ast_check_finds_a_summary_read(tmp_path):
    # The check itself can fail: a module that sorts by the words is caught.
    bad = PACKAGE / "_probe_summary_read.py"
    bad.write_text("def rank(f):\n    return 'never' in f.summary\n")
    try:
        assert summary_reads(bad) == ["mldebug/_probe_summary_read.py:2"]
    finally:
        bad.unlink()


@pytest.fixture
def judged_calls(monkeypatch):
    """How many times a verdict was made: every call of the judge, wherever it came from."""
    calls = []
    real = judge_module.judge

    def counting(evidence):
        calls.append(evidence)
        return real(evidence)

    import mldebug.explain.engine  # noqa: F401 (its name for the judge is patched too)

    for name, module in list(sys.modules.items()):
        if name.startswith("mldebug") and getattr(module, "judge", None) is real:
            monkeypatch.setattr(module, "judge", counting)
    assert snapshot_module.judge is counting
    return calls


def test_dump_judges_once(judged_calls, capsys):
    with sleepy_ranks() as launcher:
        code = main(["dump", "--pid", str(launcher.pid), "--json", "--samples", "1"])
    report = json.loads(capsys.readouterr().out)
    assert code in (0, 1) and len(report["ranks"]) == 4
    assert len(judged_calls) == 1


def test_nccl_judges_once(judged_calls, capsys):
    code = main(["nccl", str(DATA / "nccl" / "watchdog_2.4")])
    assert code == 1 and "rank 2 never called all_reduce #57" in capsys.readouterr().out
    assert len(judged_calls) == 1


def test_explain_judges_once(judged_calls, capsys):
    code = main(["explain", str(DATA / "explain" / "elastic_sigabrt_watchdog.log")])
    assert code == 1 and "rank 1 never called all_gather #88" in capsys.readouterr().out
    assert len(judged_calls) == 1


def test_the_live_view_judges_once_a_poll(judged_calls):
    from mldebug.live.poller import CollectorPoller
    from mldebug.targets import resolve_targets

    with sleepy_ranks() as launcher:
        poller = CollectorPoller(lambda: resolve_targets([launcher.pid]))
        try:
            for polls in (1, 2):
                snapshot = poller.poll()
                assert len(snapshot.ranks) == 4
                assert len(judged_calls) == polls
        finally:
            poller.close()


def test_several_nodes_are_judged_once(judged_calls):
    from mldebug.analysis.nodes import merge_nodes
    from mldebug.model import NodeFailure

    snapshot = merge_nodes([], [NodeFailure("node7", "ssh: no route to host", (0, 1))])
    assert "node_unreachable" in [f.kind for f in snapshot.findings]
    assert len(judged_calls) == 1


# ---- the judge's own rules: merged by fields, graded, ordered -------------------------------


def behind(source: str, severity: str = SEVERITY_ERROR, waited=None, seq=5) -> Finding:
    return Finding(
        KIND_OUTLIER,
        (1,),
        f"rank 1 never called all_reduce #{seq} ({source}'s words)",
        recipe="rank-outside-collective",
        severity=severity,
        waiting=(0, 2),
        waited=waited,
        collective=CollectiveRef("default_pg", seq, "all_reduce"),
        sources=(source,),
    )


def test_two_sources_saying_the_same_are_one_finding_seen_by_both():
    agent = behind(SOURCE_AGENT, SEVERITY_WARNING, waited=3.0)
    flight = behind(SOURCE_FLIGHT, SEVERITY_ERROR, waited=40.0)
    (merged,) = merge_same([agent, flight])
    # the first one's words, the worst severity, both sources, the longest wait
    assert merged.summary == agent.summary
    assert merged.severity == SEVERITY_ERROR and merged.waited == 40.0
    assert merged.sources == (SOURCE_AGENT, SOURCE_FLIGHT)


def test_another_collective_or_another_culprit_is_another_finding():
    assert len(merge_same([behind(SOURCE_AGENT), behind(SOURCE_FLIGHT, seq=9)])) == 2
    other = Finding(KIND_OUTLIER, (3,), "rank 3 ...", sources=(SOURCE_FLIGHT,))
    assert len(merge_same([behind(SOURCE_AGENT), other])) == 2


def test_the_verdict_is_ordered_once_errors_first_whatever_the_source_order():
    warning = Finding("stuck", (2,), "rank 2 does not move", severity=SEVERITY_WARNING)
    error = behind(SOURCE_FLIGHT)
    verdict = judge(Evidence(found=(warning, error)))
    assert [f.severity for f in verdict] == [SEVERITY_ERROR, SEVERITY_WARNING]


def test_a_replaced_kind_gives_way_to_the_direct_measurement():
    from mldebug.analysis.timing import KIND_STRAGGLER

    sampled = Finding(KIND_STRAGGLER, (3,), "rank 3 is the straggler (sampled)")
    verdict = judge(Evidence(found=(sampled,), replaces=frozenset({KIND_STRAGGLER})))
    assert verdict == (sampled,)  # only what the analyses here made is replaced


def test_check_judges_once(judged_calls):
    # `mldebug check`'s verdict over eight nodes' results (lines in the documented format)
    from test_check_analysis import _eight_nodes

    from mldebug.analysis.check import check_verdict
    from mldebug.collect.checklines import results_of

    verdict = check_verdict(results_of(_eight_nodes({"gpu019", "gpu022"})))
    assert verdict.findings[0].kind == "slow_link"
    assert len(judged_calls) == 1
