"""Findings from the ranks' memory, as their agents report it (state.json's `memory` and
`memory_history`). Pure functions over RankViews.

  * growth: a rank whose memory grew at each of its last GROWTH_STEPS steps (the history has
    a row each time the step moves), by more than MIN_GROWTH each time, leaving out the
    first steps (the optimizer makes its state at the first one, caches and the C
    allocator's heap fill over the first few). A healthy loop is flat after that; one that
    keeps tensors (a metric with its graph, activations "for later") grows by about the
    same amount each step, and the rate says how long it has left. RSS is noisy: the C
    allocator puts a kept tensor into a hole a freed one left, and that step does not grow.
    So a rank whose last 2 * GROWTH_STEPS steps rise as a trend (Kendall's tau at least
    MIN_TREND, a Theil-Sen slope of MIN_RATE a step or more) grows too.
  * outlier: a rank that uses far more than the others: at least OUTLIER_RATIO times the
    median of the other ranks, and OUTLIER_BYTES more.

The figure is CUDA allocated memory for ranks that use CUDA, else the process's RSS.

Ranks whose agent keeps a memory timeline are judged by time first (analysis.growth: a
robust trend in bytes a second, with or without steps, against the rank's noise and its
peers, with a forecast to the nearest limit), and what is growing is named from their
census of live tensors (analysis.census); the per-step rules above judge the others.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import replace
from itertools import pairwise
from typing import NamedTuple

from mldebug.analysis.census import census_text, changes, changes_text
from mldebug.analysis.growth import (
    Trend,
    duration_text,
    forecast,
    growing,
    held_trend,
    kendall_tau,
)
from mldebug.model import (
    KIND_MEMORY_CENSUS,
    KIND_MEMORY_GROWTH,
    KIND_MEMORY_OUTLIER,
    SEVERITY_INFO,
    SEVERITY_WARNING,
    AgentState,
    Finding,
    FindingPart,
    RankView,
)
from mldebug.ranges import format_ranks
from mldebug.wording import human_bytes as human
from mldebug.wording import ranks_text

GROWTH_STEPS = 8
MIN_GROWTH = 64 << 10  # bytes between two steps; less is noise (the agent uses the same)
MIN_RATE = 1 << 20  # bytes a step, for a trend with steps that did not grow
MIN_TREND = 0.7  # Kendall's tau of a trend (healthy ranks stay under 0.6, leaks above 0.75)
WARMUP_STEPS = 10  # rows of steps before this one are left out (RSS settles by then)
OUTLIER_RATIO = 1.5
OUTLIER_BYTES = 256 << 20
MAX_PARTS = 16
MiB = 1 << 20


class Growth(NamedTuple):
    figure: str  # "RSS" or "CUDA allocated"
    rate: float  # bytes a step
    first: tuple  # (step, bytes) where the window starts
    last: tuple  # (step, bytes) where it ends
    grew: int  # steps of the window the memory grew at
    window: int  # steps looked at


def _uses_cuda(agent: AgentState) -> bool:
    if agent.memory is not None and agent.memory.cuda_allocated:
        return True
    return any(row[3] for row in agent.memory_history)


def figure_name(cuda: bool) -> str:
    return "CUDA allocated" if cuda else "RSS"


def _slope(rows: Sequence[tuple]) -> float:
    """The Theil-Sen slope, bytes a step: the median slope over all pairs of rows, which one
    step of allocator noise does not move."""
    return statistics.median(
        (after[1] - before[1]) / (after[0] - before[0])
        for index, before in enumerate(rows)
        for after in rows[index + 1 :]
        if after[0] > before[0]
    )


def growth(agent: AgentState) -> Growth | None:
    """How the rank's memory grew over its last steps after the warm-up, when it grew at
    each of the last GROWTH_STEPS, or steadily (a trend) over the last 2 * GROWTH_STEPS; None
    when it did not, or the history is too short to say."""
    cuda = _uses_cuda(agent)
    column = 3 if cuda else 2
    rows: list[tuple[int, float]] = []  # (step, bytes) after the first steps
    for row in agent.memory_history:
        step, value = row[0], row[column]
        if value is not None and step is not None and step >= WARMUP_STEPS:
            rows.append((step, value))
    last = rows[-(GROWTH_STEPS + 1) :]
    if len(last) < GROWTH_STEPS + 1 or last[-1][0] <= last[0][0]:
        return None
    grew = sum(1 for before, after in pairwise(last) if after[1] - before[1] > MIN_GROWTH)
    if grew == GROWTH_STEPS:
        rate = (last[-1][1] - last[0][1]) / (last[-1][0] - last[0][0])
        return Growth(figure_name(cuda), rate, last[0], last[-1], grew, GROWTH_STEPS)
    window = 2 * GROWTH_STEPS
    last = rows[-(window + 1) :]
    if len(last) < window + 1 or last[-1][0] <= last[0][0]:
        return None
    rate = _slope(last)
    if kendall_tau([value for _, value in last]) >= MIN_TREND and rate >= MIN_RATE:
        grew = sum(1 for before, after in pairwise(last) if after[1] - before[1] > MIN_GROWTH)
        return Growth(figure_name(cuda), rate, last[0], last[-1], grew, window)
    return None


def _how(found: Growth, whose: str) -> str:
    if found.grew == found.window:
        return f"at each of {whose} last {found.window} steps"
    return f"at {found.grew} of {whose} last {found.window} steps"


def _live(views: Sequence[RankView]) -> list[RankView]:
    return [v for v in views if v.agent is not None and not v.gone]


def growth_findings(views: Sequence[RankView]) -> list[Finding]:
    grown = [(view, found) for view in _live(views) if view.agent and (found := growth(view.agent))]
    if not grown:
        return []
    ranks = tuple(view.rank for view, _ in grown)
    rates = [found.rate for _, found in grown]
    figure = grown[0][1].figure
    if len(grown) == 1:
        found = grown[0][1]
        how = _how(found, "its")
        summary = (
            f"rank {ranks[0]}: memory ({figure}) grew {how}, {found.rate / MiB:.1f} MiB per step "
            f"({human(found.first[1])} at step {found.first[0]}, {human(found.last[1])} at "
            f"step {found.last[0]})"
        )
    else:
        low, high = min(rates) / MiB, max(rates) / MiB
        rate_text = (
            f"{low:.1f} MiB" if f"{low:.1f}" == f"{high:.1f}" else f"{low:.1f}-{high:.1f} MiB"
        )
        summary = (
            f"ranks {format_ranks(ranks)}: memory ({figure}) grew step after step, "
            f"{rate_text} per step"
        )
    parts = [
        (
            (view.rank,),
            f"{found.rate / MiB:.1f} MiB per step ({found.figure}, grew {_how(found, 'its')})",
        )
        for view, found in grown[:MAX_PARTS]
    ]
    detail = (
        "something kept from each step stays alive: a loss or an output kept with its "
        "graph (use .item() or .detach()), a list that only grows, a cache without a bound"
    )
    return [_growth_finding(ranks, summary, detail, parts)]


def _growth_finding(
    ranks: Sequence[int], summary: str, detail: str, parts: Sequence[tuple[tuple[int, ...], str]]
) -> Finding:
    """A memory growth warning: by step or by time, the same kind, recipe and parts."""
    return Finding(
        KIND_MEMORY_GROWTH,
        tuple(ranks),
        summary,
        recipe="memory-growth",
        severity=SEVERITY_WARNING,
        detail=detail,
        parts=tuple(FindingPart(who, label) for who, label in parts),
    )


def outlier_findings(views: Sequence[RankView]) -> list[Finding]:
    live = [(v, v.agent) for v in _live(views) if v.agent is not None]
    read = [(view, agent, agent.memory) for view, agent in live if agent.memory is not None]
    cuda = any(_uses_cuda(agent) for _, agent, _ in read)
    used = {}
    for view, _, memory in read:
        value = memory.cuda_allocated if cuda else memory.rss
        if value is not None:
            used[view.rank] = value
    if len(used) < 2:
        return []
    heavy = []
    for rank, value in used.items():
        median = statistics.median(v for r, v in used.items() if r != rank)
        if value >= OUTLIER_RATIO * median and value - median >= OUTLIER_BYTES:
            heavy.append((rank, value, median))
    if not heavy or len(heavy) * 2 > len(used):  # "far more than the others": a few ranks
        return []
    ranks = tuple(rank for rank, _, _ in heavy)
    rank, value, median = max(heavy, key=lambda item: item[1] / max(item[2], 1))
    figure = figure_name(cuda)
    who = f"rank {rank}" if len(heavy) == 1 else f"ranks {format_ranks(ranks)}"
    summary = (
        f"{who} {'uses' if len(heavy) == 1 else 'use'} far more memory ({figure}) than the "
        f"others: {human(value)}, {value / max(median, 1):.1f}x the other ranks' median "
        f"({human(median)})"
    )
    return [
        Finding(
            KIND_MEMORY_OUTLIER,
            ranks,
            summary,
            recipe="memory-growth",
            severity=SEVERITY_WARNING,
            parts=tuple(
                FindingPart((r,), f"{human(v)} ({figure})") for r, v, _ in heavy[:MAX_PARTS]
            ),
        )
    ]


CENSUS_FRESH = 120.0  # seconds a census asked for is shown by dumps after it


def _rate_text(found: Trend) -> str:
    text = f"{human(found.rate)}/s"
    if found.per_step is not None:
        text += f" ({human(found.per_step)} a step)"
    return text


def _census_detail(view: RankView) -> str:
    agent = view.agent
    if agent is None or agent.census is None:
        return ""
    found = changes(agent.census, agent.census_before)
    return changes_text(view.rank, found) + "." if found else ""


def timeline_findings(views: Sequence[RankView]) -> tuple[list[Finding], set[int]]:
    """Growth by time: the findings, and the ranks they name (the per-step rule, which
    still sees a burst of growing steps that time alone calls short, leaves them out)."""
    agents = {v.rank: v.agent for v in _live(views) if v.agent and v.agent.timeline}
    trends = [t for rank, agent in agents.items() if (t := held_trend(rank, agent)) is not None]
    grown, alone = growing(trends)
    if not grown:
        return [], set()
    by_rank = {v.rank: v for v in views if v.rank in agents}
    timelines = {rank: agent.timeline for rank, agent in agents.items() if agent.timeline}
    ranks = tuple(t.rank for t in grown)
    figure = grown[0].figure
    forecasts = [(t, forecast(t, timelines[t.rank])) for t in grown]
    soonest = min(
        ((t, f) for t, f in forecasts if f is not None), key=lambda tf: tf[1].seconds, default=None
    )
    others = sorted(t.rank for t in trends if t.rank not in ranks)
    if len(grown) == 1:
        found = grown[0]
        summary = (
            f"rank {found.rank}: memory ({figure}) grows {_rate_text(found)} over its last "
            f"{found.span:.0f} s"
        )
    else:
        low, high = min(t.rate for t in grown), max(t.rate for t in grown)
        rate = human(low) if human(low) == human(high) else f"{human(low)}-{human(high)}"
        summary = (
            f"ranks {format_ranks(ranks)}: memory ({figure}) grows {rate}/s each, "
            f"steadily, over their last {min(t.span for t in grown):.0f} s"
        )
    if alone and others:
        summary += f", while {ranks_text(others)} "
        summary += "stays flat" if len(others) == 1 else "stay flat"
    if soonest is not None:
        found, when = soonest
        who = "it" if len(grown) == 1 else f"rank {found.rank}"
        summary += (
            f"; at this rate {who} reaches {when.limit} ({human(when.room)} left) in "
            f"{duration_text(when.seconds)}"
        )
    named = [text for t in grown[:MAX_PARTS] if (text := _census_detail(by_rank[t.rank]))]
    advice = (
        "Something kept from each step stays alive: a loss or an output kept with its graph "
        "(use .item() or .detach()), a list that only grows, a cache without a bound"
    )
    parts = [
        (
            (t.rank,),
            f"{_rate_text(t)} ({t.figure}, steady: tau {t.tau:.2f}, noise {human(t.noise)})",
        )
        for t in grown[:MAX_PARTS]
    ]
    finding = _growth_finding(ranks, summary, " ".join([*named, advice]), parts)
    return [_with_since(finding, grown, agents)], set(ranks)


def _with_since(found: Finding, grown: Sequence[Trend], agents: dict) -> Finding:
    """Since when the first-named rank has grown (the longest span that grows)."""
    first = grown[0]
    if first.since is None:
        return found
    ago = max(0.0, agents[first.rank].time - first.since)
    at = f"since step {first.since_step}, " if first.since_step else ""
    facts = [("since_s", f"{ago:.0f}")]
    if first.since_step:
        facts.append(("since_step", str(first.since_step)))
    when = f"{ago:.0f} s" if ago < 60 else duration_text(ago)
    return replace(found, since=f"{at}{when} ago", facts=(*found.facts, *facts))


def census_findings(views: Sequence[RankView], now: float | None = None) -> list[Finding]:
    """The censuses asked for (dump --census, the live view's key): info, while fresh."""
    found_by: list[tuple[int, int, str]] = []
    for view in _live(views):
        agent = view.agent
        census = agent.census if agent is not None else None
        if agent is None or census is None or not census.requested:
            continue
        if agent.time - census.time > CENSUS_FRESH:
            continue
        found = changes(census, agent.census_before)
        text = changes_text(view.rank, found) if found else census_text(view.rank, census)
        found_by.append((found[0].more if found else 0, view.rank, text))
    if not found_by:
        return []
    # The rank whose census changed most first; then by rank.
    shown = [(rank, text) for _, rank, text in sorted(found_by, key=lambda s: (-s[0], s[1]))]
    ranks = tuple(sorted(rank for rank, _ in shown))
    return [
        Finding(
            KIND_MEMORY_CENSUS,
            ranks,
            shown[0][1] if len(shown) == 1 else f"census of live tensors: {shown[0][1]}",
            recipe="memory-leak",
            severity=SEVERITY_INFO,
            parts=tuple(FindingPart((rank,), text) for rank, text in shown[:MAX_PARTS]),
        )
    ]


def memory_findings(views: Sequence[RankView]) -> list[Finding]:
    # Only live ranks with an agent speak of memory: one pass picks them for every rule.
    live = _live(views)
    by_time, named = timeline_findings(live)
    by_steps = growth_findings([v for v in live if v.rank not in named])
    return by_time + by_steps + outlier_findings(live) + census_findings(live)
