"""Node documents merged on the front end give the same verdict as the same ranks read
flat on one machine. The ranks are assembled from the model's own types (StackSample,
AgentState: what py-spy and the agents' state.json give; multi-node cannot exist here),
split over nodes, each node judged and written as `mldebug collect` does, sent through
JSON, read back and merged (mldebug.analysis.nodes)."""

from __future__ import annotations

import copy
import json
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mldebug.analysis.nodes import merge_nodes
from mldebug.analysis.snapshot import build_snapshot, rank_views
from mldebug.cluster.document import VERSION, Reader, node_document
from mldebug.model import (
    KIND_NONFINITE,
    Frame,
    NodeFailure,
    RankCrash,
    RankEvent,
    RankTarget,
    StackSample,
    ThreadStack,
)
from mldebug.report.jsonout import snapshot_to_json
from mldebug.report.text import render_text

TRAIN = "/job/train.py"
C10D = "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"
WAITING = (Frame("<module>", TRAIN, 60), Frame("main", TRAIN, 48), Frame("all_reduce", C10D, 3252))
CULPRIT = (Frame("<module>", TRAIN, 60), Frame("main", TRAIN, 44), Frame("load_shard", TRAIN, 21))


def job(world: int, per_node: int, culprit: int):
    targets, samples = [], {}
    for rank in range(world):
        host = f"node{rank // per_node:03d}"
        target = RankTarget(pid=1000 + rank, rank=rank, world_size=world, host=host, job="j")
        frames = CULPRIT if rank == culprit else WAITING
        thread = ThreadStack(7 + rank, "MainThread", frames, os_thread_id=rank)
        samples[target.pid] = tuple(
            StackSample(target, float(t), (thread,), cpu_seconds=1.0, main_cpu_seconds=0.5)
            for t in range(3)
        )
        targets.append(target)
    return targets, samples


def as_collect_prints(mine, samples, host, crashes=(), events=()):
    """The node's document as `mldebug collect` writes it: its ranks as read, before any
    verdict (observe.pyspy.views_of), its merged stack classes."""
    snapshot = build_snapshot(mine, samples, now=10.0, partial=True)
    views, failures = rank_views(mine, samples, now=10.0, partial=True)
    return node_document(snapshot, host, (), None, crashes, events, views=views, failures=failures)


def through_nodes(targets, samples, per_node, lost=()):
    reader, nodes, failures = Reader(), [], []
    for start in range(0, len(targets), per_node):
        mine = targets[start : start + per_node]
        host = mine[0].host
        if host in lost:
            failures.append(NodeFailure(host, "no answer within 20 s", tuple(t.rank for t in mine)))
            continue
        text = json.dumps(as_collect_prints(mine, samples, host))
        nodes.append(reader.read(json.loads(text), host))
    return merge_nodes(nodes, failures, now=10.0), reader


@pytest.mark.parametrize(("world", "per_node", "culprit"), [(8, 4, 5), (64, 8, 0), (24, 8, 23)])
def test_merged_nodes_give_the_flat_verdict(world, per_node, culprit):
    targets, samples = job(world, per_node, culprit)
    flat = build_snapshot(targets, samples, world_size=world, now=10.0)
    merged, reader = through_nodes(targets, samples, per_node)
    key = lambda f: (f.kind, f.ranks, f.summary, f.location, f.recipe)  # noqa: E731
    assert [key(f) for f in merged.findings] == [key(f) for f in flat.findings]
    assert merged.findings[0].ranks == (culprit,)
    assert [(g.ranks, g.frames, g.state) for g in merged.groups] == [
        (g.ranks, g.frames, g.state) for g in flat.groups
    ]
    assert merged.tree == flat.tree
    assert [(v.rank, v.state, v.target.host) for v in merged.ranks] == [
        (v.rank, v.state, v.target.host) for v in flat.ranks
    ]
    # Every node's copy of one stack is read into one object: memory grows with stacks.
    assert len(reader.stacks) == 2


def test_a_lost_node_is_named_with_its_ranks_and_the_verdict_stands():
    targets, samples = job(16, 4, 1)
    merged, _ = through_nodes(targets, samples, 4, lost=("node002",))
    lost = [f for f in merged.findings if f.kind == "node_unreachable"]
    assert [(f.ranks, f.recipe) for f in lost] == [((8, 9, 10, 11), "node-unreachable")]
    assert "node node002 did not answer" in lost[0].summary
    assert {v.state for v in merged.ranks if v.rank in range(8, 12)} == {"unreadable"}
    assert merged.findings[0].ranks == (1,)


@pytest.mark.parametrize(
    ("document", "said"),
    [
        ([], "not an mldebug node document"),
        ({"format": "mldebug-node", "version": 99, "stacks": [], "ranks": []}, "version 99"),
        (
            {
                "format": "mldebug-node",
                "version": VERSION,
                "stacks": [[{"frames": [1]}]],
                "ranks": [],
            },
            "frame",
        ),
        ({"format": "mldebug-node", "version": VERSION, "stacks": "x", "ranks": []}, "stacks"),
    ],
)
def test_a_bad_document_is_refused_for_its_node(document, said):
    with pytest.raises(ValueError, match=said):
        Reader().read(document, "node000")


def test_a_document_cannot_plant_markup_or_bad_ranks():
    targets, samples = job(2, 2, 1)
    document = node_document(build_snapshot(targets, samples, now=10.0, partial=True), "n")
    document["ranks"][0]["pid"] = -5  # not a pid: the rank is dropped
    document["ranks"][1]["detail"] = "\x1b[31mred\x1b]0;title\x07"
    read = Reader().read(json.loads(json.dumps(document)), "n")
    assert [v.rank for v in read.views] == [1]
    assert "\x1b" not in read.views[0].detail
    assert read.views[0].target.host == "n"  # the front end's name for the node


def test_crashes_and_agent_events_reach_the_job_findings():
    # Rank 2 of 8 crashed (its process is gone, its run directory says how); rank 5's agent
    # saw the first NaN. The node documents carry both; the findings are the flat ones.
    targets, samples = job(8, 4, 7)
    alive = [t for t in targets if t.rank != 2]
    crash = RankCrash(2, 5.0, "uncaught exception", "ValueError", "bad batch", f"{TRAIN}:33")
    event = RankEvent(5, 6.0, KIND_NONFINITE, "loss is nan", f"{TRAIN}:50", 12, (("module", "fc"),))
    flat = build_snapshot(alive, samples, world_size=8, now=10.0, crashes=(crash,), events=(event,))
    reader, nodes = Reader(), []
    for host, mine in (("node000", alive[:3]), ("node001", alive[3:])):
        crashes = [crash] if host == "node000" else []
        events = [event] if host == "node001" else []
        text = json.dumps(as_collect_prints(mine, samples, host, crashes, events))
        nodes.append(reader.read(json.loads(text), host))
    merged = merge_nodes(nodes, world_size=8, now=10.0)
    key = lambda f: (f.kind, f.ranks, f.summary, f.location)  # noqa: E731
    assert [key(f) for f in merged.findings] == [key(f) for f in flat.findings]
    kinds = {f.kind for f in merged.findings}
    assert {"crash", "nonfinite"} <= kinds, kinds


def test_a_rank_a_node_could_not_read_is_judged_as_locally():
    # py-spy never answered in time for rank 5 (a rank in the kernel: D state): the node
    # says how its reading failed, and the job's findings are the flat ones, with the
    # recipe that failure calls for.
    targets, samples = job(8, 4, 1)
    frozen = targets[5]
    samples[frozen.pid] = tuple(
        StackSample(frozen, float(t), (), failure="timeout", failure_detail="no answer in 5 s")
        for t in range(3)
    )
    flat = build_snapshot(targets, samples, world_size=8, now=10.0)
    merged, _ = through_nodes(targets, samples, 4)
    key = lambda f: (f.kind, f.ranks, f.severity, f.summary, f.recipe)  # noqa: E731
    assert [key(f) for f in merged.findings] == [key(f) for f in flat.findings]
    (unread,) = [f for f in merged.findings if f.kind == "unreadable"]
    assert (unread.ranks, unread.recipe) == ((5,), "d-state-frozen-fs")


def test_a_stack_repeated_across_nodes_is_read_once_into_one_object():
    targets, samples = job(8, 4, culprit=6)
    docs = []
    for start in (0, 4):
        mine = targets[start : start + 4]
        snapshot = build_snapshot(mine, samples, now=10.0, partial=True)
        docs.append(json.loads(json.dumps(node_document(snapshot, mine[0].host))))
    reader = Reader()
    first, second = reader.read(docs[0], "node000"), reader.read(docs[1], "node001")
    assert first.views[0].threads is second.views[0].threads  # read once, shared
    assert second.views[0].threads == Reader().read(docs[1], "node001").views[0].threads
    assert second.views[2].threads[0].frames == CULPRIT  # rank 6: its own stack
    # a stack that differs by one value is read anew, never taken for the one known
    changed = json.loads(json.dumps(docs[1]))
    changed["stacks"][0][0]["frames"][-1][2] += 1
    third = reader.read(changed, "node001")
    line = third.views[0].threads[0].frames[-1].line
    assert line == second.views[0].threads[0].frames[-1].line + 1


def test_ranks_that_say_the_same_but_rank_and_pid_are_read_as_each_of_them():
    """A node's ranks mostly say the same but their rank and pid: read once, renumbered
    (cluster.document Reader._views), yet each one's own fields still checked."""
    targets, samples = job(4, 4, culprit=3)
    document = node_document(build_snapshot(targets, samples, now=10.0, partial=True), "n")
    entries = document["ranks"]
    own = {"rank": 0, "pid": 0, "local_rank": 0}
    assert entries[1] | own == entries[0] | own  # ranks 0 and 1 differ in these only
    read = Reader().read(json.loads(json.dumps(document)), "n")
    whole = [Reader()._view(e, read_stacks(document), "n", "", 10.0) for e in entries]
    assert list(read.views) == whole  # the same views as read field by field
    assert [(v.rank, v.target.pid) for v in read.views] == [(t.rank, t.pid) for t in targets]
    entries[1]["pid"], entries[2]["rank"] = -5, True  # not a pid, not a rank: dropped
    read = Reader().read(json.loads(json.dumps(document)), "n")
    assert [v.rank for v in read.views] == [0, 3]


def read_stacks(document: dict) -> list:
    reader = Reader()
    return [reader._stack(s) for s in json.loads(json.dumps(document["stacks"]))]


# Stacks a small job's ranks may show: waiting in all_reduce from either of two lines, in a
# barrier, or elsewhere (loading a shard, or a second place); with or without a helper thread.
SHAPES = (
    WAITING,
    (Frame("<module>", TRAIN, 60), Frame("main", TRAIN, 52), Frame("all_reduce", C10D, 3252)),
    (Frame("<module>", TRAIN, 60), Frame("main", TRAIN, 70), Frame("barrier", C10D, 4720)),
    CULPRIT,
    (Frame("<module>", TRAIN, 60), Frame("main", TRAIN, 30), Frame("save", TRAIN, 12)),
)
HELPER = (Frame("run", "/usr/lib/python3.11/threading.py", 975), Frame("prefetch", TRAIN, 9))


def random_job(world: int, shapes: list[int], helpers: list[bool], absent: set[int]):
    targets, samples = [], {}
    for rank in range(world):
        if rank in absent:
            continue
        target = RankTarget(pid=1000 + rank, rank=rank, world_size=world, host="", job="j")
        threads = [ThreadStack(7 + rank, "MainThread", SHAPES[shapes[rank]], os_thread_id=rank)]
        if helpers[rank]:
            threads.append(ThreadStack(9000 + rank, "Thread-1", HELPER, os_thread_id=9000 + rank))
        samples[target.pid] = tuple(
            StackSample(target, float(t), tuple(threads), cpu_seconds=1.0, main_cpu_seconds=0.5)
            for t in range(3)
        )
        targets.append(target)
    return targets, samples


@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_ranks_judged_by_the_stacks_they_share_say_what_each_rank_judged_alone_says(data):
    """The node reader gives ranks with the same stack one shared object, and the analysis
    and the report work once per shared stack (analysis.stacks, threads, compiling): a job
    read that way says exactly what the same ranks say when each has its own copy of its
    stack, which the analysis can only take rank by rank."""
    world = data.draw(st.integers(2, 24), "world")
    per_node = data.draw(st.integers(1, 8), "per node")
    shapes = data.draw(st.lists(st.integers(0, len(SHAPES) - 1), min_size=world, max_size=world))
    helpers = data.draw(st.lists(st.booleans(), min_size=world, max_size=world))
    absent = data.draw(st.sets(st.integers(0, world - 1), max_size=world // 3))
    lost_node = data.draw(st.none() | st.integers(0, (world - 1) // per_node))
    targets, samples = random_job(world, shapes, helpers, absent)
    reader, nodes, failures = Reader(), [], []
    for number in range(0, world, per_node):
        host = f"node{number // per_node:03d}"
        mine = [replace(t, host=host) for t in targets if number <= t.rank < number + per_node]
        if number // per_node == lost_node:
            lost = tuple(range(number, min(world, number + per_node)))
            failures.append(NodeFailure(host, "no answer within 20 s", lost))
            continue
        if mine:
            by_pid = {t.pid: tuple(replace(s, target=t) for s in samples[t.pid]) for t in mine}
            text = json.dumps(as_collect_prints(mine, by_pid, host))
            nodes.append(reader.read(json.loads(text), host))
    if not nodes and not failures:
        return
    shared = merge_nodes(nodes, failures, world_size=world, now=10.0)
    alone = [replace(n, views=tuple(copy.deepcopy(v) for v in n.views)) for n in nodes]
    each = merge_nodes(alone, failures, world_size=world, now=10.0)
    assert shared.findings == each.findings
    assert (shared.groups, shared.tree, shared.ranks) == (each.groups, each.tree, each.ranks)
    assert render_text(shared, width=200) == render_text(each, width=200)
    assert snapshot_to_json(shared) == snapshot_to_json(each)
