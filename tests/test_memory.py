"""Memory findings from the agents' state.json (mldebug/analysis/memory.py): a rank whose
memory grows step after step, and a rank that uses far more than the others. Pure functions
over RankViews; the real 2-rank job is tests/test_memory_job.py."""

from __future__ import annotations

from mldebug.analysis.memory import growth, memory_findings
from mldebug.model import (
    KIND_MEMORY_GROWTH,
    KIND_MEMORY_OUTLIER,
    SEVERITY_WARNING,
    STATE_EXITED,
    STATE_RUNNING,
    AgentState,
    MemoryReading,
    RankView,
)

MiB = 1 << 20
BASE = 300 * MiB


def agent(rank: int, rss_by_step, cuda_by_step=None) -> AgentState:
    rows = tuple(
        (step, 1000.0 + step, rss, cuda_by_step[i] if cuda_by_step else None)
        for i, (step, rss) in enumerate(rss_by_step)
    )
    last_cuda = cuda_by_step[-1] if cuda_by_step else None
    return AgentState(
        rank=rank,
        pid=100 + rank,
        time=2000.0,
        step=rows[-1][0] if rows else None,
        memory=MemoryReading(rss=rows[-1][2] if rows else None, cuda_allocated=last_cuda),
        memory_history=rows,
    )


def view(rank: int, state: AgentState | None, status: str = STATE_RUNNING) -> RankView:
    return RankView(rank=rank, target=None, state=status, agent=state)


def steps(count: int, per_step: int, start: int = 1, jitter=lambda step: 0):
    """(step, rss) rows: a warm-up jump at the first step, then per_step a step."""
    return [(s, BASE + 50 * MiB + per_step * s + jitter(s)) for s in range(start, start + count)]


def test_a_rank_that_grows_each_step_is_flagged_with_its_rate_and_a_flat_one_is_not():
    leaking = view(1, agent(1, steps(20, 8 * MiB)))
    # Healthy: flat after warm-up, a few pages up and down.
    healthy = view(0, agent(0, steps(20, 0, jitter=lambda s: (s % 3) * 4096)))
    (finding,) = memory_findings([healthy, leaking])
    assert finding.kind == KIND_MEMORY_GROWTH and finding.ranks == (1,)
    assert finding.severity == SEVERITY_WARNING and finding.recipe == "memory-growth"
    assert finding.summary.startswith(
        "rank 1: memory (RSS) grew at each of its last 8 steps, 8.0 MiB per step"
    )


def test_fewer_than_eight_growing_steps_after_warm_up_say_nothing():
    # The first ten steps grow (optimizer state, caches, the C heap) and are left out.
    assert growth(agent(0, steps(17, 8 * MiB, start=0))) is None
    assert growth(agent(0, steps(19, 8 * MiB, start=0))) is not None
    # One step of the last eight that did not grow: too few steps to tell noise from a leak.
    flat_once = steps(22, 8 * MiB, jitter=lambda s: -8 * MiB if s == 20 else 0)
    assert growth(agent(0, flat_once)) is None
    # Over sixteen steps, one that did not grow is the allocator's noise: a trend.
    found = growth(agent(0, steps(30, 8 * MiB, jitter=lambda s: -8 * MiB if s == 28 else 0)))
    assert (found.grew, found.window, found.rate) == (15, 16, 8 * MiB)


# RSS in MiB of a process training Linear(1024, 1024) on a 2048x1024 batch, at each step
# (recorded on this machine with torch 2.13): kept nothing / kept a metric with its graph.
HEALTHY_RSS = [
    324,
    329,
    333,
    360,
    369,
    392,
    400,
    400,
    400,
    400,
    385,
    385,
    385,
    385,
    385,
    392,
    392,
    377,
    377,
    377,
    353,
    368,
    368,
    360,
    376,
    376,
    376,
    376,
    376,
    392,
]
LEAKING_RSS = [
    337,
    349,
    397,
    437,
    453,
    461,
    477,
    493,
    501,
    525,
    541,
    533,
    549,
    573,
    573,
    581,
    597,
    613,
    629,
    629,
    645,
    653,
    677,
    685,
    701,
    717,
    733,
    757,
    773,
    797,
]


def test_real_rss_of_a_healthy_loop_and_of_one_that_keeps_its_metric_graphs():
    healthy = agent(0, [(s, mib * MiB) for s, mib in enumerate(HEALTHY_RSS, 1)])
    leaking = agent(1, [(s, mib * MiB) for s, mib in enumerate(LEAKING_RSS, 1)])
    grows, heavy = memory_findings([view(0, healthy), view(1, leaking)])
    assert grows.kind == KIND_MEMORY_GROWTH and grows.ranks == (1,)
    assert grows.summary.startswith("rank 1: memory (RSS) grew at each of its last 8 steps, ")
    # By the end it holds twice what rank 0 does.
    assert heavy.kind == KIND_MEMORY_OUTLIER and heavy.ranks == (1,)
    # Every point of the way: the healthy one never; the leak at every step once 16 steps
    # after the warm-up are there.
    for upto in range(10, 31):
        assert growth(agent(0, [(s, m * MiB) for s, m in enumerate(HEALTHY_RSS[:upto], 1)])) is None
    flagged = [
        upto
        for upto in range(10, 31)
        if growth(agent(1, [(s, m * MiB) for s, m in enumerate(LEAKING_RSS[:upto], 1)]))
    ]
    assert flagged == list(range(26, 31))


def test_the_rate_is_per_step_even_when_rows_skip_steps():
    # The agent keeps at most a row per 0.1 s: a fast loop leaves every other step.
    rows = [(s, BASE + 2 * MiB * s) for s in range(10, 40, 2)]
    found = growth(agent(0, rows))
    assert found.figure == "RSS" and found.rate == 2 * MiB
    assert (found.first[0], found.last[0]) == (22, 38)


def test_cuda_memory_is_the_figure_when_the_rank_uses_cuda():
    rows = steps(20, 0)
    cuda = [1 << 30] * 2 + [(1 << 30) + 64 * MiB * i for i in range(18)]
    (finding,) = memory_findings([view(3, agent(3, rows, cuda))])
    assert (
        "memory (CUDA allocated) grew" in finding.summary and "64.0 MiB per step" in finding.summary
    )


def test_many_growing_ranks_make_one_finding_with_the_range_of_rates():
    views = [view(r, agent(r, steps(20, (8 + r) * MiB))) for r in range(4)]
    (finding,) = memory_findings(views)
    assert finding.ranks == (0, 1, 2, 3)
    assert "ranks 0-3: memory (RSS) grew step after step, 8.0-11.0 MiB per step" in (
        finding.summary
    )
    assert [p.label for p in finding.parts][:2] == [
        "8.0 MiB per step (RSS, grew at each of its last 8 steps)",
        "9.0 MiB per step (RSS, grew at each of its last 8 steps)",
    ]


def test_a_rank_using_far_more_than_the_others_is_flagged():
    flat = [(s, BASE) for s in range(1, 4)]
    heavy = [(s, BASE + 700 * MiB) for s in range(1, 4)]
    views = [view(r, agent(r, flat)) for r in (0, 1, 3)] + [view(2, agent(2, heavy))]
    (finding,) = memory_findings(views)
    assert finding.kind == KIND_MEMORY_OUTLIER and finding.ranks == (2,)
    assert finding.summary.startswith(
        "rank 2 uses far more memory (RSS) than the others: 1000.0 MiB, 3.3x the other ranks'"
    )


def test_more_but_not_far_more_is_no_outlier():
    # 1.5x the median but only 150 MiB more; or 300 MiB more but only 1.2x.
    for extra, base in ((150 * MiB, 300 * MiB), (300 * MiB, 1500 * MiB)):
        views = [view(r, agent(r, [(1, base)])) for r in range(3)]
        views.append(view(3, agent(3, [(1, base + extra)])))
        assert memory_findings(views) == []


def test_two_ranks_one_heavy():
    views = [view(0, agent(0, [(5, BASE)])), view(1, agent(1, [(5, BASE + 400 * MiB)]))]
    (finding,) = memory_findings(views)
    assert finding.ranks == (1,) and finding.kind == KIND_MEMORY_OUTLIER


def test_ranks_without_an_agent_or_that_exited_are_not_judged():
    leaking = agent(1, steps(20, 8 * MiB))
    assert memory_findings([view(0, None), view(1, leaking, STATE_EXITED)]) == []
