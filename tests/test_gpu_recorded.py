"""What mldebug makes of a real NCCL job hung at a sync point, recorded on an H200
(tests/data/gpu/nccl_timeout: the rank enqueued all_reduce #2 behind a kernel that never
ends and waited in `.item()`; py-spy read it, /proc measured it, NCCL's watchdog killed it).

This machine has no GPU: the recorded py-spy output, CPU use and stderr stand in for the
rank, and the analysis and the parsers are the real ones. The rank had no mldebug agent when
it was recorded; its state.json is written here per docs/agent.md with what the watchdog
says of it (SeqNum 2: the second all_reduce made, the first complete).
"""

from __future__ import annotations

import json
from pathlib import Path

from mldebug.analysis.exit_waits import timeout_of
from mldebug.analysis.snapshot import build_snapshot
from mldebug.collect.agentstate import parse_state
from mldebug.collect.pyspy import parse_pyspy_json
from mldebug.model import (
    KIND_HANG,
    KIND_PROGRESSING,
    SEVERITY_ERROR,
    STATE_RUNNING,
    STATE_WAITING,
    RankTarget,
    StackSample,
)

DATA = Path(__file__).parent / "data" / "gpu" / "nccl_timeout"
PID = 534  # the rank's pid when it was recorded
SCRIPT = "/tmp/gpu-record/nccl_timeout/scenario.py"


def recorded_samples(target: RankTarget, now: float) -> list[StackSample]:
    """Three readings of the rank as recorded: the same stack, its CPU as /proc measured."""
    threads = parse_pyspy_json((DATA / "pyspy.json").read_text(), PID)
    per_second = json.loads((DATA / "cpu_while_waiting.json").read_text())
    fractions = per_second["cpu_fraction_per_second"]
    samples, cpu = [], 100.0
    for index in range(3):
        if index:
            cpu += fractions[index - 1] * 0.4
        samples.append(
            StackSample(
                target,
                now - 0.8 + 0.4 * index,
                threads,
                cpu_seconds=cpu,
                main_cpu_seconds=cpu,
            )
        )
    return samples


def test_the_recorded_rank_spins_at_item_and_stacks_alone_call_it_working():
    now = 1_767_225_600.0
    target = RankTarget(pid=PID, rank=0, world_size=1)
    snapshot = build_snapshot([target], {PID: recorded_samples(target, now)}, 1, now=now)
    (view,) = snapshot.ranks
    # The real stack: the main thread is in train_step at the .item() line, no collective.
    assert (view.user_frame.function, view.user_frame.line, view.collective) == (
        "train_step",
        13,
        None,
    )
    # One core at 100% while it waits: without the agent the job reads as working.
    assert view.state == STATE_RUNNING and view.cpu_percent > 90
    assert [f.kind for f in snapshot.findings] == [KIND_PROGRESSING]


def test_with_its_agent_state_the_same_rank_is_waiting_in_all_reduce_2():
    now = 1_767_225_600.0
    target = RankTarget(pid=PID, rank=0, world_size=1)
    made = {
        "seq": 2,
        "op": "all_reduce",
        "time": now - 20,
        "site": f"{SCRIPT}:12",
        "shapes": [[1048576]],
        "dtypes": ["float32"],
        "async": False,
    }
    state = parse_state(
        {
            "version": 1,
            "rank": 0,
            "pid": PID,
            "time": now - 0.5,
            "step": None,
            "groups": {
                "default_pg": {
                    "size": 1,
                    "enqueued": made,
                    "completed": {"seq": 1, "op": "all_reduce", "time": now - 21},
                }
            },
            "trace": [],
        },
        0,
    )
    snapshot = build_snapshot(
        [target], {PID: recorded_samples(target, now)}, 1, now=now, agents={PID: state}
    )
    (view,) = snapshot.ranks
    assert view.state == STATE_WAITING and view.collective == "all_reduce"
    (finding,) = [f for f in snapshot.findings if f.kind == KIND_HANG]
    assert finding.severity == SEVERITY_ERROR
    assert "all_reduce" in finding.summary


def test_the_recorded_watchdog_message_is_read_as_a_timeout_of_all_reduce_2():
    stderr = (DATA / "stderr.rank0.txt").read_text()
    timeout = timeout_of(stderr)
    assert timeout is not None
    assert (timeout.nccl_seq, timeout.nccl_op) == (2, "ALLREDUCE")
