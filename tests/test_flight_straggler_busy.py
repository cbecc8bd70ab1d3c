"""A DDP job's straggler judged from the Flight Recorder rows the agents keep
(agent/timing_flight.py, analysis/timing_flight.py), on a node that gets busy: a rank late
only by what the kernel held it off its CPUs is no straggler, a real one still is.

The `timing` sections are built in the format the agent writes (docs/agent.md: steps rows
with each step's run-queue delay, flight rows with the step each collective was enqueued
in), read by the real reader and judged by the real analysis. Only the times are made up,
from a seeded generator; the figures of the busy case are those seen when a CPU-spinning
process ran beside the slow-jobs module (rank 0 "last at 152 of 249 steps ... 7 ms a step,
6%")."""

from __future__ import annotations

import random

import pytest

from mldebug.analysis.timing import judge_timing
from mldebug.collect.agenttiming import parse_timing
from mldebug.model import STATE_RUNNING, AgentState, RankView

STEP = 0.12  # seconds a step
COMPUTE = 0.08  # before the step's all_reduce


def ddp_job(late_rank: int, late_by: float, delays: dict[int, float], seed: int = 0):
    """3 ranks, 64 steps, one DDP all_reduce a step: `late_rank` enqueues it `late_by`
    seconds after the others; `delays`: each rank's median run-queue delay a step."""
    rng = random.Random(seed)
    sections = {r: {"version": 1, "calls": [], "steps": [], "flight": []} for r in range(3)}
    for step in range(1, 65):
        start = 1000.0 + step * STEP
        entered = {
            r: start + COMPUTE + rng.uniform(-0.002, 0.002) + (late_by if r == late_rank else 0)
            for r in range(3)
        }
        for r, section in sections.items():
            held = delays[r] * rng.uniform(0.5, 1.5)
            # DDP's all-reduces are C++: the step's trace sees no collective wait.
            section["steps"].append([step, start, STEP, 0.0, 0.0, 0.0, None, min(STEP, held)])
            section["flight"].append(["0", step, "all_reduce", entered[r], None, step])
    views = []
    for rank, section in sections.items():
        agent = AgentState(
            rank=rank, pid=None, time=1000.0 + 65 * STEP, timing=parse_timing(section)
        )
        views.append(RankView(rank=rank, target=None, state=STATE_RUNNING, agent=agent))
    return views


def stragglers(views) -> list[tuple[int, ...]]:
    return [f.ranks for f in judge_timing(views).findings if f.kind == "straggler"]


@pytest.mark.parametrize("seed", range(3))
def test_a_rank_late_by_what_the_kernel_held_it_back_more_than_the_others_is_not_named(seed):
    # Every rank is held off its CPU ~8 ms a step, rank 0 ~7 ms more (the scheduler keeps
    # it beside the neighbour), and it comes last by those 7 ms (6% of a step).
    busy = {0: 0.015, 1: 0.008, 2: 0.008}
    assert stragglers(ddp_job(0, 0.007, busy, seed)) == []
    # The same on a quieter node, the whole lateness its extra delay.
    held = {0: 0.021, 1: 0.003, 2: 0.003}
    assert stragglers(ddp_job(0, 0.018, held, seed)) == []


def test_the_same_lateness_without_the_extra_delay_is_a_straggler():
    # 7 ms late a step with no more delay than the others: its own doing, busy node or not.
    for delays in ({0: 0.0003, 1: 0.0003, 2: 0.0003}, {0: 0.0085, 1: 0.008, 2: 0.008}):
        assert stragglers(ddp_job(0, 0.007, delays)) == [(0,)]


@pytest.mark.parametrize("seed", range(3))
def test_a_real_straggler_on_a_busy_node_is_still_named(seed):
    # Rank 1 computes 1.4x as long (32 ms more a step) and, working longer, is held off its
    # CPU more: the others' share of a step (8 of 120 ms) of its 32 ms more, and then some.
    busy = {0: 0.008, 1: 0.008 + 0.032 * 8 / 120 + 0.003, 2: 0.008}
    (found,) = stragglers(ddp_job(1, 0.4 * COMPUTE, busy, seed))
    assert found == (1,)
