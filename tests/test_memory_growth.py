"""Memory growth by time, and what is growing: the agent's own writers (agent/memory_timeline.py,
agent/census.py) make the state.json sections, the real reader parses them
(collect/agentstate.py) and the real analysis judges them (analysis/growth.py, memory.py,
census.py). The memory figures are shapes a rank's RSS takes (a leak, a warm-up, an allocator
growing and trimming, GC pauses), fed at one point a second as the heartbeat does.
"""

from __future__ import annotations

import json
import random
import re
import threading
import time

import pytest

from mldebug.agent.census import take
from mldebug.agent.memory_timeline import Timeline
from mldebug.analysis.census import change_text, changes, changes_text
from mldebug.analysis.growth import duration_text
from mldebug.analysis.memory import memory_findings
from mldebug.collect.agentstate import parse_state
from mldebug.collect.memstate import parse_census
from mldebug.model import STATE_RUNNING, RankTarget, RankView

MB = 1_000_000
START = 1_700_000_000.0


def state_of(rank: int, values, steps: bool = True, limits: dict | None = None, cuda=False):
    """A rank's state.json as its agent writes it, from one memory figure a second."""
    timeline = Timeline()
    for i, value in enumerate(values):
        rss, allocated = (50 * MB, value) if cuda else (value, None)
        timeline.add(
            START + i, int(rss), allocated and int(allocated), i * 15 if steps else None, i * 16
        )
    section = timeline.section()
    section["limits"] = limits or {"host_total": 24 << 30, "host_available": 18 << 30}
    data = {
        "version": 1,
        "rank": rank,
        "pid": 100 + rank,
        "time": START + len(values),
        "started": START - 5,
        "memory_timeline": section,
    }
    return parse_state(json.loads(json.dumps(data)), rank)


def views(*states):
    return [
        RankView(s.rank, RankTarget(pid=s.pid, rank=s.rank), STATE_RUNNING, agent=s) for s in states
    ]


def series(seconds: int, rate: float = 0.0, noise: float = 1.5 * MB, seed: int = 0, base=400 * MB):
    rng = random.Random(seed)
    return [base + rate * i + rng.gauss(0, noise) for i in range(seconds)]


def growth(findings):
    return [f for f in findings if f.kind == "memory_growth"]


def test_a_leak_on_one_rank_is_named_with_its_rate_per_second_and_step_and_a_forecast():
    leak = state_of(0, series(60, rate=2.4 * MB, seed=1))
    flat = [state_of(r, series(60, seed=r + 2)) for r in (1, 2, 3)]
    (found,) = growth(memory_findings(views(leak, *flat)))
    assert found.ranks == (0,) and found.severity == "warning"
    # 2.4 MB a second at 15 steps a second: 2.3 MiB/s, 156 KiB a step
    assert found.summary.startswith("rank 0: memory (RSS) grows 2.3 MiB/s (156.")
    assert "KiB a step) over its last" in found.summary
    assert ", while ranks 1-3 stay flat; at this rate it reaches the host's available memory" in (
        found.summary
    )
    assert found.summary.endswith("(18.0 GiB left) in about 2 h 14 min")  # 18 GiB / 2.4 MB/s


def test_a_loop_without_steps_is_judged_by_time_alone():
    leak = state_of(1, series(60, rate=2.4 * MB, seed=1), steps=False)
    (found,) = growth(memory_findings(views(state_of(0, series(60), steps=False), leak)))
    assert found.ranks == (1,) and "a step" not in found.summary
    assert "while rank 0 stays flat" in found.summary


def sawtooth(seconds: int) -> list[float]:
    # The allocator grows by 64 MB over 8 s, then hands it back, again and again.
    return [
        400 * MB + (i % 10) * 8 * MB * (i % 10 < 8) + random.gauss(0, MB) for i in range(seconds)
    ]


def warmup(seconds: int) -> list[float]:
    # 300 MB made in the first 20 s (model, optimizer state, caches), then flat.
    return [400 * MB + min(i, 20) * 15 * MB + random.gauss(0, MB) for i in range(seconds)]


def gc_pauses(seconds: int) -> list[float]:
    # Garbage piles up for 9 s and a collection hands it back.
    return [400 * MB + (i % 9) * 4 * MB + random.gauss(0, MB) for i in range(seconds)]


@pytest.mark.parametrize(
    "shape", [series, sawtooth, warmup, gc_pauses], ids=["noise", "allocator", "warmup", "gc"]
)
@pytest.mark.parametrize("seconds", [30, 90, 400])
def test_healthy_shapes_give_no_growth(shape, seconds):
    random.seed(seconds)
    states = [state_of(r, shape(seconds)) for r in range(4)]
    assert growth(memory_findings(views(*states))) == []
    # ...nor when one rank alone has the shape and the others are quiet
    alone = [state_of(0, shape(seconds))] + [state_of(r, series(seconds, seed=r)) for r in (1, 2)]
    assert growth(memory_findings(views(*alone))) == []


def test_all_ranks_growing_alike_needs_a_longer_steadier_rise():
    early = [state_of(r, series(35, rate=2.4 * MB, seed=r)) for r in range(4)]
    assert growth(memory_findings(views(*early))) == []  # 30 s of points: not yet
    later = [state_of(r, series(90, rate=2.4 * MB, seed=r)) for r in range(4)]
    (found,) = growth(memory_findings(views(*later)))
    assert found.ranks == (0, 1, 2, 3) and "each, steadily" in found.summary
    assert "stay flat" not in found.summary


def test_the_forecast_takes_the_nearest_limit():
    cgroup = {"host_available": 18 << 30, "cgroup_max": 8 << 30, "cgroup_current": 6 << 30}
    leak = state_of(0, series(60, rate=2.4 * MB, seed=1), limits=cgroup)
    (found,) = growth(memory_findings(views(leak, state_of(1, series(60)))))
    assert "reaches the cgroup's limit (2.0 GiB left) in about 15 min" in found.summary
    gpu = {"gpu_total": 80 << 30}
    leak = state_of(0, series(60, rate=2.4 * MB, seed=1), limits=gpu, cuda=True)
    (found,) = growth(memory_findings(views(leak, state_of(1, series(60), cuda=True))))
    assert found.summary.startswith("rank 0: memory (CUDA allocated) grows")
    assert "reaches the GPU's memory" in found.summary


def test_durations_read_as_a_person_says_them():
    assert duration_text(30) == "under a minute"
    assert duration_text(45 * 60) == "about 45 min"
    assert duration_text(2 * 3600 + 10 * 60) == "about 2 h 10 min"
    assert duration_text(3 * 3600) == "about 3 h"
    assert duration_text(5 * 86400) == "about 5 days"


def test_the_timeline_holds_hours_in_a_bounded_section():
    timeline = Timeline()
    for i in range(4 * 3600):
        timeline.add(START + i, 400 * MB + i, None, i, i)
    section = timeline.section()
    points = section["points"]
    assert points[0][0] == START and points[-1][0] == START + 4 * 3600 - 1  # all 4 hours
    assert len(points) <= 241 and len(json.dumps(section)) < 16_000
    assert points[-2][0] == points[-1][0] - 1  # the last two minutes at full resolution


def test_a_state_without_the_new_sections_reads_as_before():
    state = parse_state({"version": 1, "rank": 0, "pid": 5, "time": START}, 0)
    assert state.timeline is None and state.census is None
    bad = {"version": 1, "rank": 0, "pid": 5, "time": START, "memory_timeline": {"points": 7}}
    assert parse_state(bad, 0).timeline is None


def test_the_census_of_kept_losses_names_their_kind_and_why():
    torch = pytest.importorskip("torch")
    model = torch.nn.Linear(16, 32)
    kept = []
    before = take(torch)
    for _ in range(200):
        out = model(torch.randn(8, 16))
        kept.append((out - 1).abs().mean())  # the leak: no .item()
    after = take(torch)
    data = {
        "version": 1,
        "rank": 0,
        "pid": 5,
        "time": START,
        "memory_census": {"version": 1, "current": after, "previous": before},
    }
    state = parse_state(json.loads(json.dumps(data)), 0)
    found = changes(state.census, state.census_before)
    text = changes_text(0, found)
    assert text.startswith("rank 0 holds 200 more 0-d float32 tensors with grad_fn=MeanBackward0")
    assert "each keeps its autograd graph alive (a loss kept without .item())" in text
    assert not after["partial"] and after["tensors"] >= 200
    del kept


HELD_GLOBALLY: list = []  # a module-level cache that only grows


class Trainer:
    def __init__(self) -> None:
        self.history: list = []


def test_the_census_names_what_holds_the_groups_that_grew():
    # The program's thread keeps three things growing: a local list of losses, a module's
    # global list, an object's attribute; the census (on another thread, as the agent's
    # heartbeat) names each holder with its variable.
    torch = pytest.importorskip("torch")
    trainer, weight = Trainer(), torch.ones(3, requires_grad=True)
    rounds = [threading.Event(), threading.Event()]  # set by the program after each round
    go_on, finish = threading.Event(), threading.Event()

    def train(steps: int) -> None:
        kept = []
        for done, wait in zip(rounds, (go_on, finish), strict=True):
            for _ in range(steps):
                kept.append((weight * 2).mean())  # the leak: no .item()
                HELD_GLOBALLY.extend(torch.zeros(5, 5) for _ in range(3))
                trainer.history.extend(torch.zeros(7, dtype=torch.float64) for _ in range(2))
            done.set()
            wait.wait(timeout=30)

    worker = threading.Thread(target=train, args=(64,))
    worker.start()
    try:
        assert rounds[0].wait(timeout=30)
        before = take(torch)
        assert all(len(row) == 7 for row in before["groups"])  # nothing before: no lookup
        go_on.set()
        assert rounds[1].wait(timeout=30)
        after = take(torch, before=before, lookup_budget=60.0)  # a loaded machine too
    finally:
        go_on.set()
        finish.set()
        worker.join(timeout=30)
        HELD_GLOBALLY.clear()
    held = {row[0]: row[7] for row in after["groups"] if len(row) == 8}
    assert {"[]", "[5, 5]", "[7]"} <= set(held), after["groups"]
    assert held["[5, 5]"][0] == {
        "type": "list",
        "items": 384,
        "name": "HELD_GLOBALLY",
        "whose": f"a global of {__name__}",
    }
    assert held["[7]"][0] == {
        "type": "list",
        "items": 256,
        "name": "history",
        "whose": "an attribute of Trainer",
    }
    now, then = parse_census({"version": 1, "current": after, "previous": before})
    found = changes(now, then)
    # (how many seconds apart the two censuses were depends on the machine's load)
    said = re.sub(r"than \d+ s ago", "than N s ago", changes_text(0, found))
    assert said.startswith(
        "rank 0 holds 192 more [5, 5] float32 tensors than N s ago; something keeps them (a list "
        "or a cache that only grows); held by a list of 384 items, `HELD_GLOBALLY`, a global of "
    )
    (losses,) = [change for change in found if change.group.shape == "[]"]
    text = re.sub(r"than \d+ s ago", "than N s ago", change_text(0, losses))
    assert text.startswith(
        "rank 0 holds 64 more 0-d float32 tensors with grad_fn=MeanBackward0 than N s ago; each "
        "keeps its autograd graph alive (a loss kept without .item()); held by a list of 128 "
        "items, `kept`, a local of train() at test_memory_growth.py:"
    ), text


def test_censuses_never_break_what_the_programs_thread_is_building():
    # `tuple(generator)` shrinks the tuple it filled, which fails if anyone else holds it;
    # the census's grab from the collector once made the program raise "SystemError:
    # Objects/tupleobject.c:927: bad argument to internal function" within a second here.
    torch = pytest.importorskip("torch")
    stop, taken = threading.Event(), []

    def census() -> None:
        while not stop.is_set():
            taken.append(take(torch, budget=0.5))

    def numbers(n: int):
        yield from range(n)

    worker = threading.Thread(target=census)
    worker.start()
    built = 0
    try:
        until = time.monotonic() + 6
        while time.monotonic() < until or len(taken) < 3:
            assert len(tuple(numbers(2000))) == 2000
            assert len(tuple(str(i) for i in range(50))) == 50
            built += 1
    finally:
        stop.set()
        worker.join(timeout=30)
    assert len(taken) >= 3 and built > 100


def test_a_census_holder_from_a_rank_is_data():
    row = ["[]", "float32", "cpu", True, "MeanBackward0", 20, 80]
    data = {
        "version": 1,
        "current": {
            "time": START,
            "seconds": 0.1,
            "tensors": 20,
            "groups": [
                [*row, [{"type": "list", "items": 20, "name": "x" * 999, "whose": 7}]],
                [*row, "not a list"],
                [*row, [{"items": -1}, "junk", {"type": "dict", "items": True, "name": None}]],
                [*row, [], "one too many"],
            ],
        },
    }
    census, _ = parse_census(data)
    first, second, third = census.groups
    assert first.held_by[0].name == "x" * 64 and first.held_by[0].whose is None
    assert second.held_by == ()
    (holder,) = third.held_by
    assert holder.type == "dict" and holder.items is None and holder.name is None


def test_a_census_is_taken_on_request_or_as_memory_rises_never_without_torch(tmp_path):
    import os

    from mldebug.agent.census import AUTO_EVERY, AUTO_RISE, BASELINE_AFTER, Census
    from mldebug.collect.census import request_census

    taken = []
    fake_torch = type("torch", (), {"Tensor": type("Tensor", (), {})})
    census = Census(str(tmp_path), torch_of=lambda: torch_now[0])
    torch_now = [None]
    assert not census.due(0.0, 100)  # the program has not imported torch
    torch_now[0] = fake_torch
    assert not census.due(1.0, 100)
    assert census.due(1.0 + BASELINE_AFTER, 100)  # the baseline
    census.maybe_take(1.0 + BASELINE_AFTER, 100)
    taken.append(census.current)
    later = census.current["time"] + AUTO_EVERY + 1
    assert not census.due(later, 100 + AUTO_RISE - 1)  # flat: none
    assert census.due(later, 100 + AUTO_RISE)  # risen: another
    request_census(tmp_path)
    assert census.due(census.current["time"] + 1, 100)  # asked for: at once
    census.maybe_take(census.current["time"] + 1, 100)
    assert census.current["requested"] and census.previous is taken[0]
    assert not census.due(census.current["time"] + 2, 100)  # that request is answered
    assert os.path.exists(tmp_path / "census" / "request")


def noisy_leak(seconds: int, seed: int) -> list:
    """Rank 0 leaks 0.3 MB a second under 8 MB of noise; ranks 1-3 are flat with the same
    noise: 180 s alone hold too little rise against the noise now and then."""
    rng = random.Random(seed)
    leak = [400 * MB + 0.3 * MB * i + rng.gauss(0, 8 * MB) for i in range(seconds)]
    return [leak] + [[400 * MB + rng.gauss(0, 8 * MB) for _ in range(seconds)] for _ in range(3)]


@pytest.mark.parametrize("seed", range(3))
def test_a_slow_leak_under_noise_is_named_at_every_look_and_says_since_when(seed):
    values = noisy_leak(1000, seed)
    for seconds in range(300, 1001, 100):  # the user runs `dump` again and again
        states = [state_of(r, v[:seconds]) for r, v in enumerate(values)]
        (found,) = growth(memory_findings(views(*states)))
        assert found.ranks == (0,)
        facts = dict(found.facts)
        # It grew from its first steps on (the warm-up, 5 s, left out; old points thinned).
        assert seconds - 40 <= int(facts["since_s"]) <= seconds
        assert found.since.startswith(f"since step {facts['since_step']}, ")


def test_the_newest_window_alone_would_miss_the_same_leak_now_and_then(monkeypatch):
    from mldebug.analysis import growth as trends
    from mldebug.analysis import memory

    monkeypatch.setattr(memory, "held_trend", trends.trend)
    values = noisy_leak(1000, 1)
    looks = [
        growth(memory_findings(views(*[state_of(r, v[:s]) for r, v in enumerate(values)])))
        for s in range(300, 1001, 100)
    ]
    assert [] in looks  # why the longer spans are looked at


def test_a_leak_that_stopped_fades_and_memory_handed_back_ends_it_at_once():
    rng = random.Random(5)
    leak = [400 * MB + 0.5 * MB * min(i, 400) + rng.gauss(0, 2 * MB) for i in range(1400)]
    flat = [[400 * MB + rng.gauss(0, 2 * MB) for _ in range(1400)] for _ in range(3)]

    def named(values):
        return growth(memory_findings(views(*[state_of(r, v) for r, v in enumerate(values)])))

    assert named([leak[:400]] + [f[:400] for f in flat])  # growing: named
    for seconds in range(600, 1401, 200):  # stopped at 400 s: it fades, and stays gone
        assert named([leak[:seconds]] + [f[:seconds] for f in flat]) == []
    back = leak[:400] + [400 * MB + rng.gauss(0, 2 * MB) for _ in range(30)]
    assert named([back] + [f[:430] for f in flat]) == []  # a quarter of the window: gone
