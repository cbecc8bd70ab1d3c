"""Several nodes are judged like one: a job's ranks split over any number of node documents,
in any partition, and merged on the front end give the verdict of the whole job judged at
once (the same finding kinds, ranks and severities, the same timing table).

The readings are real: tests/data/nodes/ holds what `mldebug collect --run DIR` printed for
tests/jobs/slurm_verdicts.py's 3 ranks under `mldebug run` inside sbatch (rank 1 leaks 1 MiB
a step, rank 2 computes 1.6x as long, rank 0 in a 1.5 s checkpoint pause in the first),
each rank's stacks as py-spy read them and its agent's state.json as read: memory
timeline, census, step timing, collective counts; and examples/straggler.py's healthy job,
which must stay silent however it is split. Each node's share is the document that node
would print (its ranks' entries, its groups), sent through JSON as over srun.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mldebug.analysis.judge import judge
from mldebug.analysis.nodes import merge_nodes
from mldebug.analysis.severity import ERROR_AFTER
from mldebug.analysis.snapshot import ranks_evidence
from mldebug.cluster.document import VERSION, Reader, node_document
from mldebug.collect.agentstate import MAX_TRACE
from mldebug.model import STATE_EXITED, NodeFailure, RankView

DATA = Path(__file__).parent / "data" / "nodes"
RECORDED = ("pause_leak_straggler.json", "leak_straggler.json")
# examples/straggler.py's healthy job (3 ranks, ±10% jitter, a 1 s checkpoint on rank 0
# every 25 steps) read the same way, once while it steps and once in a checkpoint
HEALTHY = ("healthy.json", "healthy_checkpoint.json")


def recorded(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def whole_verdict(document: dict):
    """The job judged at once, on one machine: every rank as read, the local analysis."""
    node = Reader().read(document, "node0")
    views = sorted(node.views, key=lambda v: v.rank)
    judged_views, evidence, table = ranks_evidence(
        views, node.world_size, node.failures, node.crashes, node.events, ERROR_AFTER
    )
    return SimpleNamespace(views=judged_views, findings=judge(evidence), timing=table)


def node_share(document: dict, ranks: set[int]) -> dict:
    """What the node that runs `ranks` prints: its ranks' entries and its stack classes."""
    groups = []
    for group in document["groups"]:
        mine = [r for r in group["ranks"] if r in ranks]
        if mine:
            groups.append({**group, "ranks": mine})
    entries = [e for e in document["ranks"] if e["rank"] in ranks]
    return json.loads(json.dumps({**document, "ranks": entries, "groups": groups}))


def through_nodes(document: dict, parts: list[set[int]], lost=()):
    reader, nodes, failures = Reader(), [], []
    for number, ranks in enumerate(parts):
        host = f"node{number:03d}"
        if number in lost:
            failures.append(NodeFailure(host, "no answer within 20 s", tuple(sorted(ranks))))
            continue
        nodes.append(reader.read(node_share(document, ranks), host))
    return merge_nodes(nodes, failures, world_size=document["world_size"], now=document["time"])


def verdict(findings) -> list[tuple]:
    return [(f.kind, f.ranks, f.severity, f.recipe, f.location, f.summary) for f in findings]


def table(timing) -> object:
    return timing  # every row, the collectives compared, the note


@st.composite
def partitions(draw, world: int) -> list[set[int]]:
    """Any assignment of the ranks to 1..world nodes (a node without ranks prints nothing)."""
    nodes = draw(st.integers(1, world))
    owner = draw(st.lists(st.integers(0, nodes - 1), min_size=world, max_size=world))
    order = draw(st.permutations(range(nodes)))  # the order nodes answer in
    parts = [{r for r in range(world) if owner[r] == node} for node in order]
    return [p for p in parts if p]


@pytest.mark.parametrize("name", RECORDED)
def test_the_recorded_job_has_the_verdicts_the_split_must_keep(name):
    document = recorded(name)
    assert document["version"] == VERSION
    whole = whole_verdict(document)
    kinds = {(f.kind, f.ranks, f.severity) for f in whole.findings}
    # rank 1's leak (with its census), rank 2 the straggler; the table has every rank
    assert ("memory_growth", (1,), "warning") in kinds, kinds
    assert ("straggler", (2,), "warning") in kinds, kinds
    assert whole.timing is not None and {r.rank for r in whole.timing.rows} == {0, 1, 2}
    assert not any(f.severity == "error" for f in whole.findings)
    if name.startswith("pause"):  # rank 0 in its 1.5 s checkpoint: a pause, info
        (pause,) = [f for f in whole.findings if f.kind == "outlier"]
        assert (pause.ranks, pause.severity) == ((0,), "info"), pause


@pytest.mark.parametrize("name", HEALTHY)
def test_a_healthy_job_read_over_nodes_stays_silent(name):
    document = recorded(name)
    merged = through_nodes(document, [{0}, {1, 2}])
    assert {f.severity for f in merged.findings} == {"info"}, verdict(merged.findings)
    assert merged.timing is not None and not any(r.straggler for r in merged.timing.rows)


@pytest.mark.parametrize("name", RECORDED + HEALTHY)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_any_split_over_nodes_merges_to_the_verdict_of_the_whole(name, data):
    document = recorded(name)
    whole = whole_verdict(document)
    parts = data.draw(partitions(document["world_size"]))
    merged = through_nodes(document, parts)
    assert verdict(merged.findings) == verdict(whole.findings)
    assert table(merged.timing) == table(whole.timing)
    assert [(v.rank, v.state) for v in merged.ranks] == [(v.rank, v.state) for v in whole.views]
    assert sorted(r for g in merged.groups for r in g.ranks) == [0, 1, 2]


def test_a_lost_node_is_an_error_of_its_own_and_the_rest_is_judged_as_before():
    document = recorded("leak_straggler.json")
    merged = through_nodes(document, [{0, 2}, {1}], lost=(1,))
    lost = [f for f in merged.findings if f.kind == "node_unreachable"]
    assert [(f.ranks, f.severity) for f in lost] == [((1,), "error")]
    assert merged.findings[0].kind == "node_unreachable"  # graded and ordered with the rest
    assert not any(f.kind == "memory_growth" for f in merged.findings)  # its leak is unseen
    assert {v.rank: v.state for v in merged.ranks}[1] == "unreadable"


def test_the_agent_state_crosses_the_document_as_read():
    document = recorded("leak_straggler.json")
    node = Reader().read(document, "node0")
    for view, entry in zip(node.views, document["ranks"], strict=True):
        state = view.agent
        assert state is not None and state.pid == entry["pid"]
        assert state.timeline is not None and state.timing is not None
        assert state.census is not None or view.rank != 1
    # A state that is not the rank's (another pid, another version) is no agent at all.
    entry = dict(document["ranks"][0])
    wrong = {**document, "ranks": [{**entry, "agent": {**entry["agent"], "pid": 1}}]}
    assert Reader().read(json.loads(json.dumps(wrong)), "n").views[0].agent is None
    old = {**document, "ranks": [{**entry, "agent": {**entry["agent"], "version": 0}}]}
    assert Reader().read(json.loads(json.dumps(old)), "n").views[0].agent is None


def test_a_nodes_agent_state_is_read_as_untrusted_data():
    # A node may send anything: an oversized section is cut at the reader's caps (those of
    # a local state.json), a field of the wrong type is absent.
    document = recorded("leak_straggler.json")
    entry = document["ranks"][0]
    agent = dict(entry["agent"])
    calls = agent["trace"]
    agent["trace"] = calls * (100_000 // len(calls))
    agent["groups"] = {"odd": {"size": "all"}, **agent["groups"]}
    hostile = {**document, "ranks": [{**entry, "agent": agent}]}
    (view,) = Reader().read(json.loads(json.dumps(hostile)), "n").views
    assert view.agent is not None and len(view.agent.trace) == MAX_TRACE
    assert [g.size for g in view.agent.groups if g.group == "odd"] == [None]


@pytest.mark.parametrize("how", ["exit code 0", "shut down"])
def test_a_rank_that_ended_on_its_node_is_judged_as_a_local_dump_judges_it(how):
    # GIVEN the healthy job, rank 0's process gone: its node's run recorded how it ended
    # (exit code 0, or its exit.json: its Python shut down, the process not reaped yet)
    # while ranks 1 and 2 still step.
    document = recorded("healthy.json")
    node = Reader().read(document, "node0")
    ended = RankView(
        rank=0,
        target=None,
        state=STATE_EXITED,
        exit_code=0 if how == "exit code 0" else None,
        shut_down=how == "shut down",
        detail="ended",
    )
    views = [ended, *sorted(node.views, key=lambda v: v.rank)[1:]]
    agents = {e["pid"]: e["agent"] for e in document["ranks"]}
    whole = merge_nodes([node], world_size=3, now=document["time"])
    written = node_document(whole, "node0", views=views, agent_files=agents)
    # WHEN its node's document is read with the others' THEN rank 0 has ended, as a dump on
    # one machine says: not "no process found", not an error.
    merged = through_nodes(json.loads(json.dumps(written)), [{0}, {1, 2}])
    _, evidence, _ = ranks_evidence(views, 3, {}, (), (), ERROR_AFTER)
    assert verdict(merged.findings) == verdict(judge(evidence))
    assert {v.rank: v.state for v in merged.ranks}[0] == STATE_EXITED
    assert not any(f.severity == "error" for f in merged.findings), verdict(merged.findings)
    words = "exited with code 0" if how == "exit code 0" else "Python shut down normally"
    assert [f.severity for f in merged.findings if f.ranks == (0,) and words in f.summary] == [
        "info"
    ], verdict(merged.findings)
    # An entry without a pid says a rank ended, and how, or it is no rank.
    (entry,) = [e for e in written["ranks"] if e["pid"] is None]
    for odd in ({"state": "running"}, {"exit_code": None, "shut_down": 0}, {"shut_down": True}):
        if how == "shut down" or "exit_code" in odd:
            said = {**written, "ranks": [{**entry, **odd}]}
            assert Reader().read(json.loads(json.dumps(said)), "n").views == (), odd
