"""The slow-job findings (analysis/timing.py, analysis/timing_arrival.py) on agents' timing
windows: simulated synchronous jobs in the agent's state.json format (tests/timing_sim.py)
and the recorded windows of a real 3-rank gloo job whose rank 1 computes 1.5x as long."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from timing_sim import simulate, snapshot, views

from mldebug.agent.timing_blocks import Blocks
from mldebug.analysis import timing_evidence as evidence
from mldebug.analysis.timing import judge_timing
from mldebug.analysis.timing_arrival import CallRecord, arrivals
from mldebug.collect.agentstate import parse_state
from mldebug.ledger.compare import rank_sum_tail
from mldebug.model.timing import StepTiming

DATA = Path(__file__).parent / "data" / "timing"


def kinds(states) -> list[tuple[str, tuple[int, ...]]]:
    return [(f.kind, f.ranks) for f in judge_timing(views(states)).findings]


def test_the_last_arriver_is_the_rank_that_waits_least_whatever_its_clock():
    records = [
        CallRecord(0, "default_pg", 1, 100.0, 100.5, "all_reduce"),
        CallRecord(1, "default_pg", 1, 7.4, 7.45, "all_reduce"),  # another node's clock
        CallRecord(2, "default_pg", 1, 50.1, 50.5, "all_reduce"),
        CallRecord(0, "default_pg", 2, 101.0, 101.1, "all_reduce"),  # rank 1 dropped it
        CallRecord(2, "default_pg", 2, 51.0, 51.1, "all_reduce"),
    ]
    found = arrivals(records)
    assert [(a.seq, a.last) for a in found] == [(1, 1)]
    assert found[0].lateness == pytest.approx(0.45 - 0.05 + (0.5 - 0.45) / 2 - 0.025, abs=0.03)


@pytest.mark.parametrize("factor", [1.2, 1.5, 2.0])
def test_a_rank_that_computes_longer_is_named_the_straggler(factor):
    states = simulate(world=4, slow_rank=3, factor=factor, jitter=0.1, steps=20)
    found = judge_timing(views(states))
    assert [(f.kind, f.ranks) for f in found.findings] == [("straggler", (3,))]
    summary = found.findings[0].summary
    assert summary.startswith("rank 3 is the straggler: it arrives last at ")
    assert "of the all_reduce calls the others wait at" in summary
    assert f"{factor:.2f}x"[:3] in summary or "x the median rank's" in summary
    assert found.findings[0].location == "/home/ana/job/train.py:48"
    rows = {row.rank: row for row in found.table.rows}
    assert rows[3].straggler and rows[3].arrival == 1
    assert rows[3].waiting < rows[0].waiting


def test_a_rank_with_a_slow_dataloader_is_input_bound_with_its_loader():
    states = simulate(world=4, slow_rank=2, data=0.03, data_factor=2.0, jitter=0.1, steps=20)
    found = judge_timing(views(states)).findings
    assert [(f.kind, f.ranks) for f in found] == [("input_bound", (2,))]
    assert (
        "DataLoader(ShardDataset, num_workers=2) at /home/ana/job/train.py:41" in found[0].summary
    )
    assert found[0].recipe == "input-bound"


def test_every_rank_waiting_for_data_is_input_bound_for_all():
    states = simulate(world=4, data=0.05, compute=0.04, jitter=0.1, steps=40)
    found = judge_timing(views(states)).findings
    assert [(f.kind, f.ranks) for f in found] == [("input_bound", (0, 1, 2, 3))]
    assert found[0].summary.startswith("all 4 ranks wait for data a median ")


def with_data_delay(states: list[dict], share: float, ranks=None) -> list[dict]:
    """The states as agents on a busy node write them: `share` of each data wait (of the
    `ranks`, default all) was the kernel holding the loader off its CPU (a 7th item per
    step), the blocks made again by the agent's own code from those steps (the last 64 of
    them: enough for the window)."""
    for state in states:
        timing = state["timing"]
        blocks = Blocks()
        held = share if ranks is None or state["rank"] in ranks else 0.0
        for row in timing["steps"]:
            row.append(round(row[4] * held, 6))
            blocks.add(*row[:6], row[6])
        timing["blocks"] = list(blocks.rows)
    return states


def test_a_rank_whose_loader_a_busy_node_held_off_its_cpu_is_not_input_bound():
    # Rank 0's batches take 1.5x as long, all of it the node holding its loader off its CPU
    # (its sleeps and reads wake late).
    job = dict(world=2, slow_rank=0, data_factor=1.5, data=0.01, compute=0.03, jitter=0.05,
               steps=60)  # fmt: skip
    assert kinds(simulate(**job)) == [("input_bound", (0,))]  # as timed
    assert kinds(with_data_delay(simulate(**job), 1 / 3, ranks=(0,))) == []


def test_a_data_wait_a_busy_node_stretched_is_not_input_bound():
    # Every rank waits 30 ms a step for data beside 60 ms of compute (about a third of the
    # step), but half of each wait is the node holding the loader off its CPU.
    job = dict(world=2, data=0.03, compute=0.06, jitter=0.1, steps=80)
    assert kinds(simulate(**job)) == [("input_bound", (0, 1))]  # as timed
    assert kinds(with_data_delay(simulate(**job), 0.5)) == []
    # A wait the node only grazed is still the limit.
    assert kinds(with_data_delay(simulate(**job), 0.05)) == [("input_bound", (0, 1))]


@pytest.mark.parametrize("steps", [12, 20, 40, 80])
def test_a_data_wait_in_the_warm_up_alone_is_not_input_bound(steps):
    # Every rank waits 50 ms for its DataLoader's workers in its first 14 steps, then none.
    states = simulate(world=2, data=0.05, compute=0.04, jitter=0.1, steps=steps,
                      data_steps=(0, 14))  # fmt: skip
    assert judge_timing(views(states)).findings == ()


@pytest.mark.parametrize("seed", range(5))
def test_a_rank_whose_loader_started_late_is_no_straggler_once_the_steps_after_it_speak(seed):
    # Rank 0's DataLoader workers start late (a busy node): it waits 3x as long for data in
    # its first 15 steps, then as the others do. After step 26 the steps past the warm-up
    # say it is no straggler, and the warm-up is no longer counted.
    states = simulate(world=4, slow_rank=0, data=0.02, data_factor=3.0, jitter=0.1, steps=26,
                      slow_steps=(1, 15), seed=seed)  # fmt: skip
    assert judge_timing(views(states)).findings == ()
    # ...while its first steps are all there is, they are judged (a slow rank is named fast)
    early = simulate(world=4, slow_rank=0, data=0.02, data_factor=3.0, jitter=0.1, steps=15,
                     seed=seed)  # fmt: skip
    assert kinds(early) == [("input_bound", (0,))]


def test_a_data_wait_that_stopped_in_the_window_is_not_input_bound():
    # Every rank waited for data until step 30, no longer: the window's newest half is clean.
    states = simulate(world=2, data=0.05, compute=0.04, jitter=0.1, steps=50,
                      data_steps=(0, 30))  # fmt: skip
    assert judge_timing(views(states)).findings == ()


def test_every_rank_in_collectives_and_nobody_late_is_comm_bound():
    states = simulate(world=4, compute=0.02, comm=0.05, jitter=0.1, steps=20)
    found = judge_timing(views(states)).findings
    assert [(f.kind, f.ranks) for f in found] == [("comm_bound", (0, 1, 2, 3))]
    assert "mldebug nccl" in found[0].summary


def test_host_syncs_are_named_with_their_call_site():
    states = simulate(world=2, compute=0.03, sync=0.04, jitter=0.1, steps=20)
    found = judge_timing(views(states)).findings
    assert [(f.kind, f.ranks) for f in found] == [("host_sync", (0, 1))]
    assert "/home/ana/job/train.py:57" in found[0].summary


@pytest.mark.parametrize("world", [2, 4, 8])
@pytest.mark.parametrize("seed", range(4))
def test_a_healthy_job_names_nobody(world, seed):
    # ±10% jitter, a 1 s checkpoint pause on rank 0 every 25 steps, GC pauses, warm-up.
    for steps in (10, 30, 64, 200):
        states = simulate(
            world=world,
            steps=steps,
            jitter=0.1,
            checkpoint_every=25,
            gc_every=20,
            seed=seed * 100 + steps,
        )
        assert kinds(states) == [], (steps, seed)


def test_a_straggler_among_eight_ranks_is_named():
    states = simulate(world=8, slow_rank=None, steps=30, jitter=0.1)
    slow = simulate(world=8, slow_rank=5, factor=1.5, steps=30, jitter=0.1, seed=1)
    assert kinds(slow) == [("straggler", (5,))]
    assert kinds(states) == []


def test_too_few_steps_judge_nothing():
    states = simulate(world=4, slow_rank=1, factor=2.0, steps=5)
    assert kinds(states) == []


def test_a_rank_that_stopped_stepping_is_not_judged_on_its_old_window():
    states = simulate(world=4, slow_rank=1, factor=2.0, steps=30)
    later = max(s["time"] for s in states) + 120
    for state in states:
        state["time"] = later  # the heartbeat goes on, the steps do not (a hang)
    assert judge_timing(snapshot(states, now=later).ranks).findings == ()


def test_a_state_without_timing_reads_as_before():
    states = simulate(world=2, steps=12)
    del states[0]["timing"]
    parsed = parse_state(states[0], 0)
    assert parsed is not None and parsed.timing is None
    assert kinds(states) == []


def test_bad_rows_are_left_out():
    state = simulate(world=2, steps=12)[0]
    timing = state["timing"]
    timing["calls"] += [["g", 0, "x", 1.0, 2.0, False], ["g", 3, "x", 5.0, 1.0, False], "junk"]
    timing["steps"] += [[1, 2.0, -1, 0, 0, 0], [True, 2.0, 1, 0, 0, 0], [1, 2.0, 1e300, 0, 0, 0]]
    timing["loaders"] = [{"dataset": 3, "batches": "x"}]
    parsed = parse_state(state, 0)
    assert len(parsed.timing.calls) == 24 and len(parsed.timing.steps) == 12
    assert parsed.timing.loaders == ()


def recorded() -> list[dict]:
    return [json.loads((DATA / f"straggler_rank1_state{r}.json").read_text()) for r in range(3)]


def test_the_recorded_job_names_its_slow_rank():
    states = recorded()
    found = judge_timing(snapshot(states).ranks)
    assert [(f.kind, f.ranks) for f in found.findings] == [("straggler", (1,))]
    assert found.findings[0].location.startswith("/home/ana/job/straggler.py:")
    assert "its work between collectives takes 1." in found.findings[0].summary


def test_the_recorded_job_without_its_slow_rank_names_nobody():
    states = [s for s in recorded() if s["rank"] != 1]
    assert judge_timing(snapshot(states).ranks).findings == ()


def recorded_look(name: str) -> list[dict]:
    return [json.loads((DATA / f"{name}_state{r}.json").read_text()) for r in range(4)]


def test_a_real_1_2x_straggler_is_named_at_step_14():
    # A real 4-rank gloo job (examples/straggler.py --factor 1.2 --jitter 0.1 under
    # `mldebug run` on a loaded 2-core machine), its state files at rank 1's step 14.
    found = judge_timing(snapshot(recorded_look("straggler_1.2x_step14")).ranks)
    assert [(f.kind, f.ranks) for f in found.findings] == [("straggler", (1,))]
    assert "13 steps compared across 4 ranks: its compute ranks this high by chance once in " in (
        found.findings[0].detail
    )


def test_a_real_healthy_look_the_test_alone_would_name_is_held_by_what_it_costs():
    # The same job healthy (±10% jitter, rank 0 pausing 1 s every 25 steps) at step 464:
    # rank 1 waited for data a little longer step after step (the machine's other load),
    # enough for the rank-sum test; the others do not wait for it, so nobody is named.
    states = recorded_look("healthy_step464")
    ranks = snapshot(states).ranks
    windows = {v.rank: v.agent.timing.steps for v in ranks}
    assert evidence.judge(windows).late == (1,)
    assert judge_timing(ranks).findings == ()


@pytest.mark.parametrize("world", [4, 8])
def test_1_2x_is_named_within_12_steps(world):
    for seed in range(10):
        slow = simulate(world=world, slow_rank=2, factor=1.2, jitter=0.1, steps=12, seed=seed)
        assert kinds(slow) == [("straggler", (2,))], seed


def test_the_rank_sum_chance_is_exact_and_its_false_alarm_rate_holds():
    assert rank_sum_tail(8, 2, 4) == pytest.approx(1 / 16)  # both steps last of 4
    assert rank_sum_tail(2, 2, 4) == 1.0
    assert rank_sum_tail(7, 2, 4) == pytest.approx(3 / 16)
    # A big job: the normal approximation agrees with the exact sum near the mean.
    assert rank_sum_tail(64 * 600, 64, 1024) == pytest.approx(
        rank_sum_tail(64 * 600, 64, 1024), rel=1e-9
    )
    # Ranks alike, 400 looks of 12 steps: the test names a rank at FALSE_ALARM at most.
    rng = random.Random(7)
    named = 0
    for _ in range(400):
        rows = {r: [] for r in range(4)}
        for step in range(12):
            for r in range(4):
                rows[r].append(StepTiming(step, 0.0, 0.1 + rng.random(), 0.0, rng.random()))
        named += bool(evidence.judge(rows).late)
    assert named <= 2  # 400 * 1e-3 is 0.4 expected


@pytest.mark.parametrize("seed", range(3))
def test_a_rank_the_kernel_held_off_its_cpu_more_than_the_others_is_no_straggler(seed):
    # Two ranks on a busy node: each held off its CPU ~8 ms a step, rank 0 ~8 ms more (the
    # scheduler keeps it beside a neighbour's threads), which stretches its work 1.13x: the
    # others wait for it, by the node's doing (a healthy job's console once named it so).
    held = simulate(world=2, slow_rank=0, factor=1.13, jitter=0.1, seed=seed,
                    delays={0: 0.016, 1: 0.008})  # fmt: skip
    assert kinds(held) == []
    # The same lateness with no more delay than the other's is the rank's own doing...
    own = simulate(world=2, slow_rank=0, factor=1.13, jitter=0.1, seed=seed,
                   delays={0: 0.008, 1: 0.008})  # fmt: skip
    assert kinds(own) == [("straggler", (0,))]
    # ...and a rank with 1.3x the work, held off its CPU more for working longer, is one.
    slow = simulate(world=2, slow_rank=0, factor=1.3, jitter=0.1, seed=seed,
                    delays={0: 0.008 + 0.018 * 0.008 / 0.067 + 0.002, 1: 0.008})  # fmt: skip
    assert kinds(slow) == [("straggler", (0,))]
