"""Memory growth from time: a robust trend over each rank's memory timeline (state.json's
`memory_timeline`), with or without steps, judged against the rank's own noise and its peers.

For each live rank, the points of the last WINDOW seconds after its warm-up (WARMUP seconds
after its first step or collective; without either, WARMUP_ALONE seconds after the agent
started: imports, the model built, the first compile; and WARMUP after a torch.compile its
agent saw end, none while one is under way) give:

  * a Theil-Sen slope in bytes a second (the median of the slopes between all pairs of
    points: a GC pause or the allocator handing back a block does not move it), and per
    step where the rank counts steps;
  * Mann-Kendall's tau (how steadily it rises: 1 when each point is above all before it; a
    warm-up that rose once and stayed flat, or an allocator that grows and trims, stays
    well under MIN_TAU);
  * the noise: the median absolute distance of the points from the fitted line (x1.4826,
    a standard deviation for normal noise).

A rank grows when its rise over the window is at least MIN_RISE and NOISE_TIMES its noise,
its slope at least MIN_RATE, its tau at least MIN_TAU, its newest half still climbs at
half that rate (a warm-up levels off), and its newest points are near its highest.

A verdict that holds (held_trend): a noisy stretch can hide a slow leak in the newest WINDOW
seconds, and the user who runs `dump` again would see it come and go. Where the window does
not grow, longer spans back to the warm-up are tried (doubling): a leak seen over a longer
span is still named, and fades once it has stopped for a while (the span's newest half no
longer climbs; memory handed back fails "near its highest" at once). `since` is the start of
the longest span that grows: the rank has grown at least since then. Against its peers: a rank that grows PEER_TIMES faster than the median of the
others is the strongest signal, and MIN_SPAN seconds of points suffice; when all ranks grow
alike (one code path for all), a longer span (MIN_SPAN_ALL) and a steadier rise
(MIN_TAU_ALL) are asked for. The forecast says when, at this rate, the rank reaches the
nearest limit: the GPU's memory for CUDA allocated, else the cgroup's limit or the host's
available memory.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import NamedTuple

from mldebug.model import AgentState, MemoryTimeline

WINDOW = 180.0  # seconds of the newest points looked at
WARMUP = 5.0  # seconds after the first step or collective that are left out
WARMUP_ALONE = 30.0  # without steps or collectives: seconds after the agent started
MIN_POINTS = 12
MIN_SPAN = 20.0  # seconds of points, for a rank that grows while its peers do not
MIN_SPAN_ALL = 60.0  # seconds of points, when every rank grows alike
MIN_RISE = 24 << 20  # bytes over the window
MIN_RATE = 256 << 10  # bytes a second
MIN_TAU = 0.6
MIN_TAU_ALL = 0.8
NOISE_TIMES = 6.0
PEER_TIMES = 4.0
MAX_PAIRS_POINTS = 64  # points a trend is fitted over (thinned evenly beyond): 2k pairs a rank


class Trend(NamedTuple):
    rank: int
    figure: str  # "RSS" or "CUDA allocated"
    rate: float  # bytes a second (Theil-Sen)
    per_step: float | None  # bytes a step, where the rank counts steps
    tau: float  # Mann-Kendall
    noise: float  # bytes
    span: float  # seconds of points
    first: float  # bytes at the start of the window (fitted)
    last: int  # bytes at the newest point
    grows: bool  # by the rank's own points (before its peers are looked at)
    since: float | None = None  # when the longest span that grows began (held_trend)
    since_step: int | None = None  # the rank's step then, where it counts steps


def theil_sen(points: Sequence[tuple[float, int]]) -> float:
    slopes = [
        (after[1] - before[1]) / (after[0] - before[0])
        for index, before in enumerate(points)
        for after in points[index + 1 :]
        if after[0] > before[0]
    ]
    return statistics.median(slopes) if slopes else 0.0


def kendall_tau(values: Sequence[float]) -> float:
    """Kendall's tau of the values against time: 1 when each is above all before it, 0 for
    no trend, -1 falling (the Mann-Kendall trend test's statistic)."""
    pairs = len(values) * (len(values) - 1) / 2
    score = sum(
        (later > value) - (later < value)
        for index, value in enumerate(values)
        for later in values[index + 1 :]
    )
    return score / pairs if pairs else 0.0


def _thin(points: list, most: int) -> list:
    if len(points) <= most:
        return points
    step = len(points) / most
    return [points[int(i * step)] for i in range(most - 1)] + [points[-1]]


def uses_cuda(timeline: MemoryTimeline) -> bool:
    return any(point[2] for point in timeline.points)


def _warm(agent: AgentState, timeline: MemoryTimeline) -> float:
    """When the rank's warm-up is over: the first point with a step or a collective, plus
    WARMUP; without any, the agent's start (or first point) plus WARMUP_ALONE."""
    for when, _rss, _cuda, step, calls in timeline.points:
        if (step is not None and step > 0) or (calls is not None and calls > 0):
            return when + WARMUP
    start = agent.started if agent.started is not None else timeline.points[0][0]
    return start + WARMUP_ALONE


def _compiled(agent: AgentState) -> float:
    """When the rank's torch.compile warm-up is over: WARMUP after its last compile ended
    (inductor loads its compiler and the compiled code once); never while one is under way."""
    seen = agent.compile
    if seen is None:
        return 0.0
    if seen.since is not None:
        return float("inf")
    return seen.ended + WARMUP if seen.ended is not None else 0.0


def held_trend(rank: int, agent: AgentState) -> Trend | None:
    """The rank's trend over the newest WINDOW seconds, or, where that does not grow, over
    the shortest longer span (doubling, back to the warm-up) that does; `since`: the start
    of the longest span that grows."""
    found = trend(rank, agent)
    timeline = agent.timeline
    if found is None or timeline is None:
        return found
    warm = max(_warm(agent, timeline), _compiled(agent))
    newest = timeline.points[-1][0]
    longest = found if found.grows else None
    seconds = WINDOW
    while newest - seconds > warm:
        seconds *= 2
        longer = trend(rank, agent, seconds)
        if longer is None or not longer.grows:
            continue
        longest = longer
        if not found.grows:
            found = longer
    if longest is None or not found.grows:
        return found
    begin = max(warm, newest - longest.span - 1e-6)
    first = next((p for p in timeline.points if p[0] >= begin), timeline.points[-1])
    return found._replace(since=first[0], since_step=first[3])


def trend(rank: int, agent: AgentState, seconds: float = WINDOW) -> Trend | None:
    """The rank's trend over its newest `seconds` of points after the warm-up; None with
    too few."""
    timeline = agent.timeline
    if timeline is None or len(timeline.points) < MIN_POINTS:
        return None
    cuda = uses_cuda(timeline)
    column = 2 if cuda else 1
    newest = timeline.points[-1][0]
    begin = max(_warm(agent, timeline), _compiled(agent), newest - seconds)
    rows = [p for p in timeline.points if p[0] >= begin and p[column] is not None]
    if len(rows) < MIN_POINTS or rows[-1][0] - rows[0][0] < MIN_SPAN:
        return None
    rows = _thin(rows, MAX_PAIRS_POINTS)
    points: list[tuple[float, int]] = [(p[0], int(p[column] or 0)) for p in rows]
    figure = "CUDA allocated" if cuda else "RSS"
    values = [v for _, v in points]
    if max(values) - min(values) < MIN_RISE:  # flat: no fit needed (1,024 ranks a refresh)
        quarter = max(1, len(values) // 4)
        span = points[-1][0] - points[0][0]
        rough = (statistics.median(values[-quarter:]) - statistics.median(values[:quarter])) / span
        return Trend(rank, figure, rough, None, 0.0, 0.0, span, float(values[0]), values[-1], False)
    rate = theil_sen(points)
    tau = kendall_tau([v for _, v in points])
    t0 = points[0][0]
    intercept = statistics.median(v - rate * (t - t0) for t, v in points)
    noise = 1.4826 * statistics.median(abs(v - intercept - rate * (t - t0)) for t, v in points)
    span = points[-1][0] - t0
    rise = rate * span
    steps = [(p[0], p[3]) for p in rows if p[3] is not None]
    per_step = None
    if len(steps) >= 2 and steps[-1][1] > steps[0][1]:
        per_second = (steps[-1][1] - steps[0][1]) / max(steps[-1][0] - steps[0][0], 1e-9)
        per_step = rate / per_second
    quarter = max(1, len(values) // 4)
    # Trimmed since: the newest points well below the highest are no leak (yet).
    recent = statistics.median(values[-quarter:])
    still_high = recent >= max(values) - max(rise / 4, 3 * noise)
    # Still rising: the newest half climbs at half the rate at least (a warm-up that has
    # levelled off does not; a leak does).
    half = points[len(points) // 2 :]
    still_rising = len(half) >= 4 and theil_sen(half) >= rate / 2
    grows = (
        still_rising
        and rise >= MIN_RISE
        and rise >= NOISE_TIMES * noise
        and rate >= MIN_RATE
        and tau >= MIN_TAU
        and still_high
    )
    return Trend(rank, figure, rate, per_step, tau, noise, span, intercept, values[-1], grows)


def growing(trends: Sequence[Trend]) -> tuple[list[Trend], bool]:
    """(the ranks that grow, whether they grow alone: their peers stay flat)."""
    grown = []
    alone = True
    for found in trends:
        if not found.grows:
            continue
        peers = [t.rate for t in trends if t.rank != found.rank]
        if peers and found.rate >= PEER_TIMES * max(statistics.median(peers), 0.0):
            grown.append(found)  # it grows while the others stay (about) flat
        elif found.span >= MIN_SPAN_ALL and found.tau >= MIN_TAU_ALL:
            grown.append(found)
            alone = False
    return grown, alone and bool(grown) and len(grown) < len(trends)


class Forecast(NamedTuple):
    seconds: float
    limit: str  # "the GPU's memory", "the cgroup's limit", "the host's available memory"
    room: int  # bytes left before it


def forecast(found: Trend, timeline: MemoryTimeline) -> Forecast | None:
    """When, at this rate, the rank reaches its nearest limit."""
    if found.rate <= 0:
        return None
    options = []
    if found.figure == "CUDA allocated":
        if timeline.gpu_total:
            options.append(("the GPU's memory", timeline.gpu_total - found.last))
    else:
        if timeline.cgroup_max and timeline.cgroup_current is not None:
            options.append(("the cgroup's limit", timeline.cgroup_max - timeline.cgroup_current))
        if timeline.host_available is not None:
            options.append(("the host's available memory", timeline.host_available))
    options = [(name, room) for name, room in options if room > 0]
    if not options:
        return None
    name, room = min(options, key=lambda option: option[1])
    return Forecast(room / found.rate, name, room)


def duration_text(seconds: float) -> str:
    """'about 2 h 10 min', 'about 45 min', 'under a minute', 'about 3 days'."""
    if seconds < 60:
        return "under a minute"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"about {minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"about {hours} h {minutes} min" if minutes else f"about {hours} h"
    return f"about {round(seconds / 86400)} days"
