"""`mldebug dump --slurm` at scale does per-rank work only where a rank differs from its
node's others, and that way says exactly what reading every rank on its own says.

The command path is the one the benchmark times (benchmarks/bench_commands.py --only front):
SLURM's side is recorded (a 16-node SLURM cannot exist here: squeue, scontrol and an srun
that passes on the nodes' documents run as subprocesses from tmp_path), the documents are
written by the real writer (`node_document`) from a job assembled from the model's own
types, and the front end reads, merges and judges them as a user's command does."""

from __future__ import annotations

import copy
import gc
import json
import os
from dataclasses import replace
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mldebug import cli
from mldebug.analysis import nodes as merging
from mldebug.analysis.nodes import merge_nodes
from mldebug.analysis.snapshot import build_snapshot, rank_views
from mldebug.cluster.document import Reader, node_document
from mldebug.model import Frame, RankTarget, StackSample, ThreadStack
from mldebug.report.jsonout import snapshot_to_json
from mldebug.report.text import render_text

TRAIN = "/job/train.py"
C10D = "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"
WAITING = (Frame("<module>", TRAIN, 60), Frame("main", TRAIN, 48), Frame("all_reduce", C10D, 3252))
BARRIER = (Frame("<module>", TRAIN, 60), Frame("main", TRAIN, 70), Frame("barrier", C10D, 4720))
LOADING = (Frame("<module>", TRAIN, 60), Frame("main", TRAIN, 44), Frame("load_shard", TRAIN, 21))
HELPER = (Frame("run", "/usr/lib/python3.11/threading.py", 975), Frame("prefetch", TRAIN, 9))
PER_NODE = 8


def job(nodes: int, culprit: int, odd: dict[int, tuple[Frame, ...]] | None = None):
    """A job of `nodes` x 8 ranks waiting in all_reduce, but `culprit` (loading a shard) and
    the `odd` ranks' other stacks; every rank with a prefetch thread."""
    odd = {culprit: LOADING, **(odd or {})}
    targets, samples = [], {}
    for rank in range(nodes * PER_NODE):
        host = f"gpu{rank // PER_NODE:03d}"
        target = RankTarget(pid=20_000 + rank, rank=rank, world_size=nodes * PER_NODE, host=host)
        threads = (
            ThreadStack(1, "MainThread", odd.get(rank, WAITING)),
            ThreadStack(2, "Thread-1 (prefetch)", HELPER),
        )
        samples[target.pid] = tuple(
            StackSample(target, 100.0 + t, threads, cpu_seconds=5.0, main_cpu_seconds=1.0)
            for t in range(3)
        )
        targets.append(target)
    return targets, samples


def documents(targets, samples) -> list[dict]:
    """Each node's document as `mldebug collect` prints it."""
    out = []
    for start in range(0, len(targets), PER_NODE):
        mine = targets[start : start + PER_NODE]
        snapshot = build_snapshot(mine, samples, now=110.0, partial=True)
        views, failures = rank_views(mine, samples, now=110.0, partial=True)
        document = node_document(snapshot, mine[0].host, views=views, failures=failures)
        out.append(json.loads(json.dumps(document)))
    return out


def recorded_slurm(tmp_path, monkeypatch, docs: list[dict]) -> None:
    """squeue, scontrol and srun first on PATH: a running job on the documents' nodes, one
    step of 8 tasks a node, and srun passing on each node's document (one a line)."""
    lines = tmp_path / "nodes.jsonl"
    lines.write_text("".join(json.dumps(d) + "\n" for d in docs))
    last = len(docs) - 1
    tools = {
        "squeue": f"echo 'RUNNING|gpu[000-{last:03d}]'",
        "scontrol": (
            "echo 'StepId=4242.0 UserId=me(1000) State=RUNNING "
            f"NodeList=gpu[000-{last:03d}] Tasks={len(docs) * PER_NODE} Dist=Block'"
        ),
        "srun": f"exec cat {lines}",
    }
    folder = tmp_path / "slurm"
    folder.mkdir()
    for name, body in tools.items():
        (folder / name).write_text(f"#!/bin/sh\n{body}\n")
        (folder / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}:{os.environ['PATH']}")


@pytest.fixture
def counted(monkeypatch):
    """How often the front end read a rank entry field by field, and how often it put the
    nodes' ranks side by side in a map of every rank."""
    counts = {"read field by field": 0, "mapped rank by rank": 0}

    def counting(name, real):
        def call(*args, **kwargs):
            counts[name] += 1
            return real(*args, **kwargs)

        return call

    monkeypatch.setattr(Reader, "_view", counting("read field by field", Reader._view))
    side_by_side = counting("mapped rank by rank", merging._side_by_side)
    monkeypatch.setattr(merging, "_side_by_side", side_by_side)
    return counts


def test_dump_slurm_reads_each_kind_of_rank_once_and_merges_without_a_map_of_ranks(
    tmp_path, monkeypatch, capsys, counted
):
    # GIVEN 16 nodes: the ranks wait in all_reduce, rank 2 of node 5 waits in a barrier,
    # rank 83 loads a shard
    nodes, barrier = 16, 5 * PER_NODE + 2
    targets, samples = job(nodes, culprit=83, odd={barrier: BARRIER})
    recorded_slurm(tmp_path, monkeypatch, documents(targets, samples))
    # WHEN the user asks for the verdict
    try:
        code = cli.main(["dump", "--slurm", "4242", "--json"])
    finally:
        gc.unfreeze()  # dump keeps what it read out of the collector's passes until it ends
    said = json.loads(capsys.readouterr().out)
    # THEN the verdict is the one of every rank read on one machine
    flat = snapshot_to_json(build_snapshot(targets, samples, now=110.0))
    assert code == 1
    assert [f["summary"] for f in said["findings"]] == [f["summary"] for f in flat["findings"]]
    assert said["findings"][0]["ranks"] == [83]
    assert len(said["ranks"]) == nodes * PER_NODE
    # AND only the ranks that differ from the one before them were read field by field: the
    # first rank, the odd two, and the rank after each (their node's usual again); never a
    # rank per node, and no map of every rank was made
    assert counted == {"read field by field": 5, "mapped rank by rank": 0}


def test_a_node_whose_ranks_are_not_in_order_is_merged_by_the_map_and_says_the_same():
    targets, samples = job(4, culprit=13)
    docs = documents(targets, samples)
    reader = Reader()
    read = [reader.read(d, d["host"]) for d in docs]
    in_order = merge_nodes(read, world_size=32, now=110.0)
    shuffled = replace(read[1], views=tuple(reversed(read[1].views)))  # rank 15 before 8
    assert merging._in_rank_order([read[0], shuffled, *read[2:]], 32) is None
    mapped = merge_nodes([read[0], shuffled, *read[2:]], world_size=32, now=110.0)
    assert snapshot_to_json(mapped) == snapshot_to_json(in_order)
    # a rank two nodes claim, or one the world size misses, is not for the nodes put end to end
    assert merging._in_rank_order([read[0], read[0]], 16) is None
    assert merging._in_rank_order(read[1:], 32) is None
    assert merging._in_rank_order(read, 33) is None
    assert merging._in_rank_order(read, 32) == [v for node in read for v in node.views]


def test_a_template_carries_to_the_next_node_only_where_its_stack_number_names_the_same_stack():
    targets, samples = job(2, culprit=3)
    first, second = documents(targets, samples)
    entry = second["ranks"][-1]
    assert entry["stack"] == first["ranks"][-1]["stack"] == 0  # the waiting ranks' stack
    # GIVEN the next node's stack number 0 is another stack (its helper thread is named
    # otherwise), while its ranks say all else as the last node's did
    second["stacks"][0][1]["name"] = "Thread-2 (prefetch)"
    reader = Reader()
    reader.read(first, "gpu000")
    read = reader.read(second, "gpu001")
    # THEN its ranks are read as they are there, with their node's host
    alone = Reader().read(json.loads(json.dumps(second)), "gpu001")
    assert read.views == alone.views
    assert {v.threads[1].name for v in read.views} == {"Thread-2 (prefetch)"}
    assert {v.target.host for v in read.views} == {"gpu001"}
    # AND where the stack is the same, the last node's template is its ranks' view there
    third = Reader()
    third.read(first, "gpu000")
    again = third.read(documents(targets, samples)[1], "gpu001")
    assert again.views == Reader().read(documents(targets, samples)[1], "gpu001").views


def test_a_rank_entry_that_leaves_a_field_out_is_read_field_by_field():
    targets, samples = job(1, culprit=6)
    (document,) = documents(targets, samples)
    del document["ranks"][2]["worker"]
    del document["ranks"][0]["failure"]  # the first: no template made of it
    document["ranks"][4]["local_rank"] = "three"  # not a number: none
    read = Reader().read(document, "gpu000")
    reader = Reader()
    stacks = [reader._stack(s) for s in document["stacks"]]
    whole = [reader._view(e, stacks, "gpu000", "", 110.0) for e in document["ranks"]]
    assert list(read.views) == whole
    assert read.views[4].target.local_rank is None


SHAPES = (WAITING, BARRIER, LOADING)


@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_the_nodes_put_end_to_end_say_what_the_map_of_every_rank_says(data):
    """Any job, split over nodes of any size: merged end to end (the usual case) and through
    the map of every rank (the general one), the snapshot, the report and the JSON are one."""
    nodes = data.draw(st.integers(1, 6), "nodes")
    odd = data.draw(
        st.dictionaries(st.integers(0, nodes * PER_NODE - 1), st.sampled_from(SHAPES), max_size=5)
    )
    targets, samples = job(nodes, culprit=data.draw(st.integers(0, nodes * PER_NODE - 1)), odd=odd)
    reader = Reader()
    read = [reader.read(d, d["host"]) for d in documents(targets, samples)]
    end_to_end = merge_nodes(read, world_size=nodes * PER_NODE, now=110.0)
    with mock.patch.object(merging, "_in_rank_order", return_value=None):
        mapped = merge_nodes(read, world_size=nodes * PER_NODE, now=110.0)
    copied = [replace(n, views=tuple(copy.deepcopy(v) for v in n.views)) for n in read]
    with mock.patch.object(merging, "_in_rank_order", return_value=None):
        alone = merge_nodes(copied, world_size=nodes * PER_NODE, now=110.0)
    for other in (mapped, alone):
        assert (end_to_end.findings, end_to_end.groups, end_to_end.tree) == (
            other.findings,
            other.groups,
            other.tree,
        )
        assert end_to_end.ranks == other.ranks
        assert render_text(end_to_end, width=200) == render_text(other, width=200)
        assert snapshot_to_json(end_to_end) == snapshot_to_json(other)
