"""Step series for the change-over-time tests and benchmark: fed through the real agent's
history (agent/step_history.py) and the real state.json reader, then judged by the real
analysis. Only the steps' durations are made up (a generator with a seed), not the code."""

from __future__ import annotations

import json
import random
from collections.abc import Callable

from mldebug.agent.step_history import StepHistory
from mldebug.collect.agenttiming import parse_timing
from mldebug.model import STATE_RUNNING, AgentState, RankView

# (step) -> (compute, data, collective, sync) seconds of that step
Shape = Callable[[int], tuple[float, float, float, float]]
# (step, its parts) -> the step's run-queue delay, seconds (agent/runqueue.py's count)
Delay = Callable[[int, tuple[float, float, float, float]], float]


def healthy(
    rng: random.Random,
    compute: float = 0.020,
    data: float = 0.002,
    collective: float = 0.004,
    jitter: float = 0.15,
    warmup: int = 10,
    eval_every: int = 200,
    eval_seconds: float = 4.0,
    ckpt_every: int = 300,
    ckpt_seconds: float = 12.0,
) -> Shape:
    """A healthy job: jitter, slow first steps, an evaluation and a checkpoint pause now and
    then (each inside one step, as a loop that evaluates between optimizer steps has it)."""

    def shape(step: int) -> tuple[float, float, float, float]:
        c = compute * rng.uniform(1 - jitter, 1 + jitter) * (4.0 if step < warmup else 1.0)
        if rng.random() < 0.01:  # a GC pause
            c += compute * 3
        if eval_every and step % eval_every == eval_every - 1:
            c += eval_seconds
        if ckpt_every and step % ckpt_every == ckpt_every - 1:
            c += ckpt_seconds
        return c, data * rng.uniform(0.5, 1.5), collective * rng.uniform(0.7, 1.3), 0.0

    return shape


def slower(base: Shape, from_step: int, part: str, extra: float) -> Shape:
    """`base`, with `extra` seconds more of `part` in every step from `from_step` on."""
    index = ("compute", "data", "collective", "sync").index(part)

    def shape(step: int) -> tuple[float, float, float, float]:
        parts = list(base(step))
        if step >= from_step:
            parts[index] += extra
        return parts[0], parts[1], parts[2], parts[3]

    return shape


def busier_node(
    base: Shape, from_step: int, stretch: float, explained: float, rng: random.Random
) -> tuple[Shape, Delay]:
    """`base` on a node that gets busier at `from_step`: each step's compute and collectives
    take `stretch` times as long, and the kernel's count of the step's run-queue delay holds
    `explained` of what they grew (a share of the rest is the cache and the memory bus that
    the neighbour shares), about 10% of the step before it."""

    def shape(step: int) -> tuple[float, float, float, float]:
        compute, data, coll, sync = base(step)
        if step >= from_step:
            compute, coll = compute * stretch, coll * stretch
        return compute, data, coll, sync

    def delay(step: int, parts: tuple[float, float, float, float]) -> float:
        compute, _, coll, _ = parts
        busy = compute + coll
        quiet = busy / stretch if step >= from_step else busy
        return 0.1 * quiet * rng.uniform(0.5, 1.5) + explained * (busy - quiet)

    return shape, delay


def history_section(
    shape: Shape, steps: int, start: float = 1000.0, delay: Delay | None = None
) -> dict:
    """The `timing` section an agent would write after `steps` steps of `shape` (with the
    steps' run-queue delay where `delay` gives it)."""
    history = StepHistory()
    now = start
    for step in range(1, steps + 1):
        parts = shape(step)
        compute, data, coll, sync = parts
        wall = compute + data + coll + sync
        held = min(wall, delay(step, parts)) if delay is not None else None
        history.add_step(step, now, wall, coll, data, sync, held)
        now += wall
    section = {"version": 1, "calls": [], "steps": [], "history": history.rows()}
    return json.loads(json.dumps(section))  # as the file carries it


def calls_section(shape: Shape, calls: int, start: float = 1000.0) -> dict:
    """The same where the program counts no step: the collectives' cadence."""
    history = StepHistory()
    now, data_total = start, 0.0
    for count in range(1, calls + 1):
        compute, data, coll, _ = shape(count)
        data_total += data
        now += compute + data
        history.add_call(count, now, coll, data_total, 0.0)
        now += coll
    section = {"version": 1, "calls": [], "steps": [], "history": history.rows()}
    return json.loads(json.dumps(section))


def views_of(sections: list[dict]) -> list[RankView]:
    views = []
    for rank, section in enumerate(sections):
        timing = parse_timing(section)
        rows = section["history"]["rows"] if section.get("history") else []
        now = rows[-1][2] if rows else 0.0
        agent = AgentState(rank=rank, pid=None, time=now, timing=timing)
        views.append(RankView(rank=rank, target=None, state=STATE_RUNNING, agent=agent))
    return views
