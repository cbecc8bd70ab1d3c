"""The collective ledger's contract (mldebug/ledger/rules.py): group names both ways, every
source's op names, dtypes, the one freshness rule, and state.json's open schema."""

from __future__ import annotations

import pytest

import mldebug.ledger.rules as rules
from mldebug.agent import collectives
from mldebug.agent.heartbeat import Heartbeat
from mldebug.collect.agentstate import parse_state, read_state
from mldebug.files import rundir, safeio


@pytest.mark.parametrize(
    "ranks, name",
    [([3, 1, 2, 7], "ranks:1-3,7"), ([0, 1, 2, 3, 8], "ranks:0-3,8"), ([5], "ranks:5")],
)
def test_a_group_named_by_its_ranks_reads_back_to_them(ranks, name):
    assert rules.ranks_group_name(ranks) == name == collectives.format_ranks(ranks)
    assert rules.ranks_of_group(name) == frozenset(ranks)


def test_a_digest_name_and_other_names_have_no_members_to_read():
    long = rules.ranks_group_name(range(0, 4000, 2))
    assert long.startswith("ranks:2000#") and len(long) < rules.MAX_GROUP_NAME
    for name in (long, "default_pg", "1", "ranks:", "ranks:1-", "ranks:3-1", "ranks:a,b"):
        assert rules.ranks_of_group(name) is None, name
    # a name is data from a rank: a range cannot expand to millions of members
    assert rules.ranks_of_group("ranks:0-99999999999") is None


@pytest.mark.parametrize(
    "spelling, name",
    [
        ("all_reduce", "all_reduce"),  # the agent
        ("nccl:all_reduce", "all_reduce"),  # Flight Recorder's profiling_name
        ("gloo:all_reduce", "all_reduce"),
        ("nccl:_allgather_base", "all_gather_into_tensor"),
        ("nccl:_reduce_scatter_base", "reduce_scatter_tensor"),
        ("nccl:send 0->1", "send"),
        ("ALLREDUCE", "all_reduce"),  # the watchdog's OpType
        ("_ALLGATHER_BASE", "all_gather_into_tensor"),
        ("ALLTOALL_BASE", "all_to_all_single"),
        ("AllReduce", "all_reduce"),  # NCCL RAS
        ("AllGather", "all_gather"),
        ("ReduceScatter", "reduce_scatter"),
        ("Broadcast", "broadcast"),
        ("some_new_op", "some_new_op"),  # unknown: kept
    ],
)
def test_every_sources_op_name_becomes_torchs(spelling, name):
    assert rules.op_name(spelling) == name


def test_p2p_ends_and_dtypes():
    assert rules.p2p_peers("send 0->1") == (0, 1) == rules.p2p_peers("nccl:recv 1<-0")
    assert rules.p2p_peers("all_reduce") is None
    assert [rules.dtype_name(d) for d in ("Float", "torch.float32", "BFloat16", "Long")] == [
        "float32",
        "float32",
        "bfloat16",
        "int64",
    ]


def test_shapes_must_match_for_an_allowlist_only():
    assert rules.same_shape_expected("nccl:all_reduce")
    assert not rules.same_shape_expected("gather")  # the agent records the root's list
    assert rules.same_shape_expected("gather", inputs_only=True)  # FR: inputs alone
    assert not rules.same_shape_expected("scatter", inputs_only=True)
    assert not rules.same_shape_expected("all_to_all", inputs_only=True)
    assert not rules.same_shape_expected("unknown_op", inputs_only=True)


def test_one_freshness_rule():
    assert rules.stale_after(None) == rules.stale_after(1.0) == 10.0
    assert rules.stale_after(4.0) == 20.0
    assert rules.is_fresh(9.9, 1.0) and not rules.is_fresh(10.1, 1.0)
    assert not rules.is_fresh(None, 1.0)


def test_the_reader_takes_a_state_with_sections_it_does_not_know(tmp_path):
    # what the agent's own writer wrote, with the sections others add (timing, a long
    # memory history) and a future one
    paths = rundir.RunPaths(safeio.make_private_dir(tmp_path / "run"))
    safeio.make_private_dir(paths.ranks_dir)
    safeio.make_private_dir(paths.rank_dir(0))
    beat = Heartbeat(
        paths.state_file(0),
        safeio.write_json_atomic,
        0,
        100.0,
        collectives.Tracer(_rankrules()),
        None,
        None,
        clock=lambda: 200.0,
    )
    data = beat.state()
    assert data["version"] == rules.STATE_VERSION
    assert set(data) <= set(rules.STATE_KEYS)
    data.update(timing={"steps": []}, memory_long=[[1, 2]], something_else={"x": 1})
    safeio.write_json_atomic(paths.state_file(0), data)
    state = read_state(paths.root, 0)
    assert state is not None and state.time == 200.0 and state.rank == 0
    assert parse_state(dict(data, version=2), 0) is None  # a version it does not know
    assert parse_state(dict(data, rank=1), 0) is None


def _rankrules():
    from mldebug import rankrules

    return rankrules
