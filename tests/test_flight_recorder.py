"""torch's Flight Recorder as a cross-check (docs/agent.md, `flight_recorder`).

The agent's part (mldebug/agent/flight.py) is tested on the JSON dumps of a real torch 2.13
gloo job (tests/data/agent/fr_gloo_rank*.json: 2 ranks under `mldebug run`, 3 all_reduces of
[4], a broadcast of [2, 3], an all_reduce of [2] on new_group([0, 1]); then rank 0 made an
all_reduce of [8] with async_op=True that rank 1 skipped, and each rank called
`_dump_fr_trace_json()`), with a counting stand-in for the dump where its calls matter. The
reader and the verdict are tested with state.json files as the contract describes them.
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest
from testkit.agent_states import LOAD, NOW, SPIN, TRAIN, call, snapshot, state

from mldebug.agent import eventlog, flight, heartbeat
from mldebug.collect.agentstate import parse_state
from mldebug.files import safeio
from mldebug.model import (
    KIND_OUTLIER,
    SEVERITY_ERROR,
    SEVERITY_INFO,
    SEVERITY_WARNING,
    STATE_WAITING,
    FlightGroup,
)

DATA = Path(__file__).parent / "data" / "agent"
C10D = "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"


def dump_of(rank: int) -> bytes:
    return (DATA / f"fr_gloo_rank{rank}.json").read_bytes()


@pytest.fixture
def event_log(tmp_path, monkeypatch):
    path = tmp_path / "events.jsonl"
    monkeypatch.setattr(eventlog, "_writer", None)
    monkeypatch.setattr(eventlog, "_failed", set())
    monkeypatch.setattr(eventlog, "_faults", frozenset())
    eventlog.configure(path, 0, safeio.open_append, lambda: 3)
    return lambda: [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


# ---------------------------------------------------------------------------- the parser


def test_the_real_gloo_dump_is_summarised_per_group():
    summary = flight.summarise(json.loads(dump_of(0)))
    assert summary == {
        "default_pg": {
            "last": {
                "seq": 5,
                "op": "all_reduce",
                "sizes": [[8]],
                "dtypes": ["Float"],
                "retired": False,
                "created": summary["default_pg"]["last"]["created"],
            },
            "pending": 1,
        },
        "1": {
            "last": {
                "seq": 1,
                "op": "all_reduce",
                "sizes": [[2]],
                "dtypes": ["Float"],
                "retired": True,
                "created": summary["1"]["last"]["created"],
            },
            "pending": 0,
        },
    }
    created = summary["default_pg"]["last"]["created"]
    assert isinstance(created, float) and 1.7e9 < created < 1e11
    # Rank 1 skipped the last all_reduce: its last entry is the broadcast, retired.
    other = flight.summarise(json.loads(dump_of(1)))
    assert other["default_pg"]["last"]["op"] == "broadcast"
    assert other["default_pg"]["last"]["sizes"] == [[2, 3]]
    assert (other["default_pg"]["last"]["seq"], other["default_pg"]["pending"]) == (4, 0)


def test_group_names_are_the_agents():
    assert flight.group_name(["0", "default_pg"]) == "default_pg"
    assert flight.group_name(["1", "undefined"]) == "1"
    assert flight.group_name(["abc", "my_sub"]) == "my_sub"
    assert flight.group_name(["abc", ""]) == "abc"
    assert flight.group_name("0") is None and flight.group_name(["", ""]) is None


def test_garbage_in_a_dump_is_left_out():
    data = json.loads(dump_of(0))
    data["entries"] += [
        "x",
        {"process_group": ["0", "default_pg"], "collective_seq_id": "9"},
        {"process_group": None, "collective_seq_id": 9},
        {"process_group": ["0", "default_pg"], "collective_seq_id": True},
    ]
    assert flight.summarise(data)["default_pg"]["last"]["seq"] == 5
    assert flight.summarise({"entries": {}}) == {} and flight.summarise([]) == {}


# ---------------------------------------------------------------------------- when it dumps


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def counting(raw: bytes = b"", fail: Exception | None = None):
    calls = []

    def dump(**kwargs):
        calls.append(kwargs)
        if fail is not None:
            raise fail
        return raw or dump_of(0)

    return calls, (lambda: dump)


def test_a_rank_whose_steps_move_never_calls_the_dump():
    calls, dumper = counting()
    clock = Clock(1000.0)
    part = flight.Flight(1.0, started=990.0, dumper=dumper, clock=clock)
    # 10 minutes of heartbeats, one step every 2 s, a traced call made and completed at each.
    for beat in range(600):
        clock.now = 1000.0 + beat
        step_time = clock.now - (beat % 2)
        groups = {"default_pg": {"enqueued": {"seq": beat, "time": clock.now - 0.1}}}
        assert part.summary(groups, step_time) is None
    assert calls == [] and part.dumps == 0


def test_a_still_step_dumps_at_most_every_5_seconds():
    calls, dumper = counting()
    clock = Clock(1000.0)
    part = flight.Flight(1.0, started=900.0, dumper=dumper, clock=clock)
    assert part.summary({}, step_time=996.0) is None  # still for 4 intervals: moving
    assert calls == []
    clock.now = 1001.5
    first = part.summary({}, step_time=996.0)
    assert first["default_pg"]["pending"] == 1
    assert calls == [{"includeCollectives": True, "onlyActive": False}]
    for now in (1002.5, 1005.0, 1006.4):
        clock.now = now
        assert part.summary({}, step_time=996.0) is first
    assert len(calls) == 1
    clock.now = 1006.6
    part.summary({}, step_time=996.0)
    assert len(calls) == 2
    # The step moved again: the summary is gone and no dump is made.
    clock.now = 1020.0
    assert part.summary({}, step_time=1019.5) is None and len(calls) == 2


def traced(pending_since: float) -> tuple[dict, dict]:
    """(call #7 made at `pending_since`, the groups with it pending) as a heartbeat sees them."""
    made = {"seq": 7, "op": "all_reduce", "time": pending_since}
    return made, {"default_pg": {"enqueued": made, "completed": {"seq": 6}}}


def test_a_traced_call_pending_for_two_heartbeats_is_stuck_too():
    calls, dumper = counting()
    clock = Clock(1000.0)
    part = flight.Flight(1.0, started=999.0, dumper=dumper, clock=clock)
    made, groups = traced(998.5)
    assert part.summary(groups, step_time=999.5) is None  # pending 1.5 s
    groups["default_pg"]["enqueued"] = {**made, "time": 997.5}
    assert part.summary(groups, step_time=999.5) is not None  # pending 2.5 s
    done = {"default_pg": {"enqueued": {**made, "time": 990.0}, "completed": {"seq": 7}}}
    clock.now = 1010.0
    assert part.summary(done, step_time=1009.0) is None
    assert len(calls) == 1


def test_a_reading_is_kept_only_while_the_trace_stands_still():
    # A rank stuck in a traced all_reduce for 2.5 s (a busy node): the recorder is read,
    # its entry pending. The call then completes, the step still has not moved (a
    # checkpoint pause): the reading kept from before would show the call pending still.
    calls, dumper = counting()
    clock = Clock(1000.0)
    part = flight.Flight(1.0, started=900.0, dumper=dumper, clock=clock)
    made, pending = traced(997.5)
    read = part.summary(pending, step_time=994.0)
    assert read["default_pg"]["pending"] == 1 and read["default_pg"]["read"] == 1000.0
    clock.now = 1001.0
    assert part.summary(pending, step_time=994.0) is read  # nothing moved: kept
    done = {"default_pg": {"enqueued": made, "completed": {"seq": 7}}}
    clock.now = 1002.0
    assert part.summary(done, step_time=994.0) is None  # moved: not kept, no dump yet
    assert len(calls) == 1
    clock.now = 1005.5  # 5 s since the dump, the step still: read again
    again = part.summary(done, step_time=994.0)
    assert again["default_pg"]["read"] == 1005.5 and len(calls) == 2
    clock.now = 1006.0
    assert part.summary(done, step_time=994.0) is again


def test_without_an_initialised_torch_distributed_nothing_is_called(monkeypatch):
    calls = []
    c10d = types.SimpleNamespace(_dump_fr_trace_json=lambda **kw: calls.append(kw) or b"{}")
    dist = types.SimpleNamespace(is_initialized=lambda: False)
    monkeypatch.setitem(sys.modules, "torch.distributed", dist)
    monkeypatch.setitem(sys.modules, "torch._C._distributed_c10d", c10d)
    assert flight._dumper() is None
    part = flight.Flight(1.0, started=0.0, clock=lambda: 1000.0)
    assert part.summary({}, None) is None and calls == []
    dist.is_initialized = lambda: True
    assert flight._dumper() is c10d._dump_fr_trace_json
    # A CUDA build's NCCL recorder, where only that exists.
    nccl = types.SimpleNamespace(_dump_nccl_trace_json=lambda **kw: b"{}")
    monkeypatch.setitem(sys.modules, "torch._C._distributed_c10d", nccl)
    assert flight._dumper() is nccl._dump_nccl_trace_json
    monkeypatch.delitem(sys.modules, "torch.distributed")
    assert flight._dumper() is None


@pytest.mark.parametrize(
    "fail,raw",
    [(RuntimeError("boom"), b""), (None, b"not json"), (None, b" " * (17 << 20))],
    ids=["raises", "not-json", "over-17-MiB"],  # the raw bytes would be a 17 MB test id
)
def test_a_failing_dump_is_said_once_and_the_part_stands_aside(event_log, fail, raw):
    calls, dumper = counting(raw, fail)
    clock = Clock(1000.0)
    part = flight.Flight(1.0, started=0.0, dumper=dumper, clock=clock)
    assert part.summary({}, None) is None
    for now in (1010.0, 1020.0, 1030.0):
        clock.now = now
        assert part.summary({}, None) is None
    assert len(calls) == 1 and part.off
    (line,) = event_log()
    assert line["kind"] == "agent_error" and line["part"] == "flight_recorder"


def test_the_heartbeat_writes_the_field_only_while_the_rank_looks_stuck(event_log):
    clock = Clock(1000.0)
    steps = types.SimpleNamespace(value=3, time=999.5)
    beat = heartbeat.Heartbeat(
        "/nonexistent", None, 0, 990.0, None, steps, None, interval=1.0, clock=clock
    )
    calls, dumper = counting()
    beat.flight._dumper = dumper
    assert "flight_recorder" not in beat.state()
    clock.now = 1010.0
    written = beat.state()
    assert written["flight_recorder"]["default_pg"]["last"]["seq"] == 5
    assert len(calls) == 1
    # What it wrote, the reader reads.
    (group, sub) = parse_state(json.loads(json.dumps(written)), 0).flight
    assert group == FlightGroup(
        "default_pg", 5, "all_reduce", False, 1, group.created, ((8,),), ("Float",), read=1010.0
    )
    assert (sub.group, sub.retired, sub.pending) == ("1", True, 0)


# ---------------------------------------------------------------------------- the reader


def test_the_reader_checks_every_field():
    base = state(0, None, None)
    assert parse_state(base, 0).flight == ()
    last = {"seq": 9, "op": "all_reduce", "sizes": [[36]], "dtypes": ["Float"]}
    base["flight_recorder"] = {
        "default_pg": {"last": {**last, "retired": False, "created": NOW - 20}, "pending": 2},
        "bad_seq": {"last": {**last, "seq": "9", "retired": False}, "pending": 1},
        "bad_retired": {"last": {**last, "retired": 0}, "pending": 1},
        "bad_pending": {"last": {**last, "retired": True}, "pending": -1},
        "bad_last": {"last": [], "pending": 0},
        "": {"last": {**last, "retired": True}, "pending": 0},
        "bad_created": {"last": {**last, "retired": True, "created": "x"}, "pending": 0},
    }
    groups = parse_state(base, 0).flight
    assert [g.group for g in groups] == ["default_pg", "bad_created"]
    assert groups[0] == FlightGroup(
        "default_pg", 9, "all_reduce", False, 2, NOW - 20, ((36,),), ("Float",)
    )
    assert groups[1].created is None
    base["flight_recorder"] = ["default_pg"]
    assert parse_state(base, 0).flight == ()


# ---------------------------------------------------------------------------- the verdict

DDP_SITE = f"{TRAIN}:60"
# Where a rank waits in DDP's gradient all-reduce: loss.backward(), no collective in Python.
BACKWARD = (
    *SPIN[:2],
    SPIN[2].__class__("train_step", TRAIN, 60),
    SPIN[2].__class__("backward", "/venv/lib/python3.11/site-packages/torch/_tensor.py", 600),
)


def with_flight(data: dict, seq: int, retired: bool, created: float, pending=None) -> dict:
    entry = {"seq": seq, "op": "all_reduce", "sizes": [[36]], "dtypes": ["Float"]}
    pending = (0 if retired else 1) if pending is None else pending
    data["flight_recorder"] = {
        "default_pg": {
            "last": {**entry, "retired": retired, "created": created},
            "pending": pending,
        }
    }
    return data


def ddp_states(waited: float = 30.0, culprit_flight: bool = True) -> dict:
    """Ranks 0, 1, 3 made all_reduce #4 in Python long ago (complete), then entered backward:
    their recorders show DDP's all_reduce #9 pending `waited` s. Rank 2 is in load_batch."""
    done = call(4, enqueued=NOW - 60, completed=NOW - 59.9)
    states = {r: with_flight(state(r, done, 4), 9, False, NOW - 0.5 - waited) for r in (0, 1, 3)}
    states[2] = state(2, done, 4, time=NOW - 0.3)
    if culprit_flight:
        with_flight(states[2], 8, True, NOW - 60)
    return states


STACKS = {0: BACKWARD, 1: BACKWARD, 2: LOAD, 3: BACKWARD}


def test_a_rank_waiting_in_ddps_all_reduce_names_the_rank_elsewhere(tmp_path):
    snap = snapshot(tmp_path, ddp_states(), STACKS, busy={0: False, 1: False, 3: False})
    first = snap.findings[0]
    assert first.kind == KIND_OUTLIER and first.severity == SEVERITY_ERROR
    assert first.ranks == (2,)
    assert first.location == f"{TRAIN}:31"
    assert first.recipe == "rank-outside-collective"
    assert first.summary == (
        "rank 2 is not in all_reduce #9, which ranks 0-1,3 wait in (torch's Flight "
        f"Recorder); it is at {TRAIN}:31 in load_batch"
    )
    assert "DDP's gradient all-reduce" in first.detail
    assert "Flight Recorder shows all_reduce #9 of float32[36] not complete" in first.detail
    assert [p.ranks for p in first.parts] == [(2,), (0, 1, 3)]
    states = {v.rank: v.state for v in snap.ranks}
    assert [states[r] for r in (0, 1, 3)] == [STATE_WAITING] * 3
    assert snap.ranks[0].collective == "all_reduce"
    assert snap.ranks[0].detail.startswith("its Flight Recorder: made all_reduce #9, ")
    assert len([f for f in snap.findings if f.kind == KIND_OUTLIER]) == 1


def test_without_the_flight_recorder_no_rank_is_named_from_it(tmp_path):
    states = ddp_states()
    for data in states.values():
        data.pop("flight_recorder", None)
    snap = snapshot(tmp_path, states, STACKS, busy={0: False, 1: False, 3: False})
    assert not any("Flight Recorder" in f.summary for f in snap.findings)
    assert not any(v.state == STATE_WAITING for v in snap.ranks)


def test_a_culprit_whose_recorder_was_not_read_is_a_warning(tmp_path):
    snap = snapshot(tmp_path, ddp_states(culprit_flight=False), STACKS)
    first = snap.findings[0]
    assert first.kind == KIND_OUTLIER and first.ranks == (2,)
    assert first.severity == SEVERITY_WARNING


def test_a_pending_entry_younger_than_two_heartbeats_is_a_call_in_transit(tmp_path):
    snap = snapshot(tmp_path, ddp_states(waited=1.5), STACKS)
    assert not any("Flight Recorder" in f.summary for f in snap.findings)
    assert not any(v.state == STATE_WAITING for v in snap.ranks)


def test_ranks_all_in_the_same_pending_entry_name_nobody_from_it(tmp_path):
    states = ddp_states()
    with_flight(states[2], 9, False, NOW - 30)
    snap = snapshot(tmp_path, states, {**STACKS, 2: BACKWARD})
    assert not any("Flight Recorder" in f.summary for f in snap.findings)
    assert all(v.state == STATE_WAITING for v in snap.ranks)


def test_a_rank_with_a_traced_call_pending_keeps_the_agents_verdict(tmp_path):
    # The NCCL case of test_agent_verdict: ranks 0, 1, 3 wait in traced all_reduce #38; their
    # recorders also show an entry pending. The verdict is the agent's, as before.
    states = {r: with_flight(state(r, call(38), 37), 40, False, NOW - 30) for r in (0, 1, 3)}
    states[2] = with_flight(state(2, call(37, completed=NOW - 29), 37, time=NOW - 0.3), 39, True, 0)
    snap = snapshot(tmp_path, states, {0: SPIN, 1: SPIN, 2: LOAD, 3: SPIN})
    first = snap.findings[0]
    assert first.summary.startswith("rank 2 never called all_reduce #38 ")
    assert not any("Flight Recorder" in f.summary for f in snap.findings)
    assert snap.ranks[0].detail.startswith("its agent: made all_reduce #38")


def test_the_last_state_at_exit_makes_no_dump(event_log):
    clock = Clock(1010.0)
    steps = types.SimpleNamespace(value=3, time=999.5)
    beat = heartbeat.Heartbeat(
        "/nonexistent", None, 0, 990.0, None, steps, None, interval=1.0, clock=clock
    )
    calls, dumper = counting()
    beat.flight._dumper = dumper
    beat._stopping = True
    assert "flight_recorder" not in beat.state() and calls == []


def test_a_pending_entry_read_before_the_rank_moved_on_is_no_wait(tmp_path):
    # Seen on a healthy 2-rank gloo job on a busy node: rank 0 waited 3 s in its traced
    # all_reduce #30 (the recorder was read then, its entry pending), the call completed,
    # and rank 0 sleeps in a 1 s checkpoint pause; rank 1 already waits in #31 for it. The
    # reading is older than the call's completion: rank 0 waits in nothing.
    site = f"{TRAIN}:113"
    done = call(30, enqueued=NOW - 5.2, completed=NOW - 1.5, site=site, **{"async": False})
    rank0 = with_flight(state(0, done, 30, time=NOW - 0.5), 90, False, NOW - 5.1)
    rank0["groups"]["default_pg"]["completed"]["time"] = NOW - 1.5
    rank0["flight_recorder"]["default_pg"]["read"] = NOW - 2.5
    made = call(31, enqueued=NOW - 0.8, site=f"{TRAIN}:109", **{"async": False})
    states = {0: rank0, 1: state(1, made, 30, time=NOW - 0.3)}
    pause = (*SPIN[:2], SPIN[2].__class__("checkpoint_pause", TRAIN, 72))
    in_all_reduce = (*SPIN[:2], SPIN[2].__class__("all_reduce", C10D, 3000))
    stacks = {0: pause, 1: in_all_reduce}
    snap = snapshot(tmp_path, states, stacks, busy={0: False, 1: False})
    assert [f for f in snap.findings if f.severity != SEVERITY_INFO] == []
    assert snap.ranks[0].state != STATE_WAITING
    # The same reading with nothing completed since: rank 0 waits in the entry.
    rank0["flight_recorder"]["default_pg"]["read"] = NOW - 1.0
    snap = snapshot(tmp_path, states, stacks, busy={0: False, 1: False})
    assert snap.ranks[0].state == STATE_WAITING
    assert snap.ranks[0].detail.startswith("its Flight Recorder: made all_reduce #90")
