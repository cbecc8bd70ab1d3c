"""Agents' state.json `timing` sections of a simulated synchronous job, in the agent's own
format (mldebug/agent/timing.py writes these rows), for the analysis tests: each step every
rank loads a batch, computes, then all_reduces twice (gradients, loss); a collective
completes on every rank once the last rank has entered it, plus the transfer time.

The knobs are the noise a healthy job has (jitter, a checkpoint pause on rank 0 every N
steps, a GC pause now and then) and what makes a job slow (a rank's compute or data
factor, everyone's transfer time).
"""

from __future__ import annotations

import random

from mldebug.agent.timing_blocks import Blocks
from mldebug.analysis.snapshot import build_snapshot
from mldebug.collect.agentstate import parse_state
from mldebug.model import AgentState, RankTarget, RankView

START = 1_767_225_600.0


def simulate(
    world: int = 4,
    steps: int = 64,
    compute: float = 0.060,
    data: float = 0.005,
    comm: float = 0.002,
    slow_rank: int | None = None,
    factor: float = 1.0,
    data_factor: float = 1.0,
    jitter: float = 0.0,
    checkpoint_every: int = 0,
    checkpoint_seconds: float = 1.0,
    gc_every: int = 0,
    sync: float = 0.0,
    seed: int = 0,
    slow_steps: tuple[int, int] | None = None,
    comm_later: tuple[int, float] | None = None,
    data_steps: tuple[int, int] | None = None,
    delays: dict[int, float] | None = None,
    more_data: dict[int, float] | None = None,
) -> list[dict]:
    """One state.json (as a dict) per rank after `steps` steps. `slow_steps`: (first, last)
    step at which `slow_rank` is slow (default: all); `comm_later`: (step, comm) from which
    on every transfer takes `comm` instead; `data_steps`: (first, last) step at which the
    ranks wait `data` for their batch (default: all); `delays`: rank -> its run-queue delay
    a step (the steps' last column, agent/runqueue.py; default: not known); `more_data`:
    rank -> seconds it waits for its batch more than the others, every step. The `blocks` rows are made by the agent's own
    code (agent/timing_blocks.py) from the same steps."""
    blocks = [Blocks() for _ in range(world)]
    rng = random.Random(seed)
    clock = [START + 0.001 * r for r in range(world)]  # each rank's own clock offset
    now = START
    calls: list[list] = [[] for _ in range(world)]
    rows: list[list] = [[] for _ in range(world)]
    seq = 0
    begun = [now] * world
    for step in range(1, steps + 1):
        entered = []
        parts = []
        slow_now = slow_steps is None or slow_steps[0] <= step <= slow_steps[1]
        for r in range(world):
            slow = r == slow_rank and slow_now
            waits = data_steps is None or data_steps[0] <= step <= data_steps[1]
            d = data * (data_factor if slow else 1.0) if waits else 0.0
            d += (more_data or {}).get(r, 0.0)
            c = compute * (factor if slow else 1.0)
            c *= 1 + rng.uniform(-jitter, jitter)
            if gc_every and rng.random() < 1 / gc_every:
                c += 0.05  # a GC pause
            entered.append(begun[r] + d + c + sync)
            parts.append((d, sync))
        coll = [0.0] * world
        for _ in range(2):  # gradients, then the loss
            seq += 1
            done = max(entered) + (comm_later[1] if comm_later and step >= comm_later[0] else comm)
            for r in range(world):
                calls[r].append(
                    [
                        "default_pg",
                        seq,
                        "all_reduce",
                        entered[r] - START + clock[r],
                        done - START + clock[r],
                        False,
                    ]
                )
                coll[r] += done - entered[r]
            entered = [done] * world
        end = entered[0]
        for r in range(world):
            wall = end - begun[r]
            if r == 0 and checkpoint_every and step % checkpoint_every == 0:
                wall += checkpoint_seconds
            rows[r].append(
                [step, begun[r] - START + clock[r], wall, coll[r], parts[r][0], parts[r][1]]
            )
            blocks[r].add(*rows[r][-1])
            if delays is not None:
                rows[r][-1] += [None, delays[r] * rng.uniform(0.8, 1.2)]
        # Rank 0's checkpoint: the others wait for it in the next step's first collective.
        pause = checkpoint_seconds if checkpoint_every and step % checkpoint_every == 0 else 0.0
        begun = [end + (pause if r == 0 else 0.0) for r in range(world)]
        if pause:
            begun = [end + pause if r == 0 else end for r in range(world)]
    states = []
    for r in range(world):
        states.append(
            {
                "version": 1,
                "rank": r,
                "pid": 20_000 + r,
                "time": rows[r][-1][1] + rows[r][-1][2] + 0.5,
                "interval": 1.0,
                "step": steps,
                "groups": {},
                "trace": [],
                "timing": {
                    "version": 1,
                    "calls": calls[r][-256:],
                    "steps": rows[r][-64:],
                    "loaders": [
                        {
                            "dataset": "ShardDataset",
                            "num_workers": 2,
                            "site": "/home/ana/job/train.py:41",
                            "batches": steps,
                            "wait": steps * data,
                        }
                    ],
                    "syncs": [["/home/ana/job/train.py:57", steps, steps * sync]] if sync else [],
                    "work": [["/home/ana/job/train.py:48", 30, 0.0]],
                    "blocks": list(blocks[r].rows),
                },
            }
        )
    return states


def agents(states: list[dict]) -> list[AgentState]:
    parsed = [parse_state(s, s["rank"]) for s in states]
    assert all(p is not None for p in parsed)
    return parsed  # type: ignore[return-value]


def views(states: list[dict]) -> list[RankView]:
    """RankViews of the ranks, through the real snapshot (their states, no stacks)."""
    return list(snapshot(states).ranks)


def snapshot(states: list[dict], now: float | None = None):
    parsed = agents(states)
    targets = [
        RankTarget(pid=a.pid or 0, rank=a.rank, world_size=len(states), job="sim") for a in parsed
    ]
    when = now if now is not None else max(a.time for a in parsed)
    return build_snapshot(
        targets,
        {},
        world_size=len(states),
        job="sim",
        now=when,
        agents={a.pid: a for a in parsed},
    )
