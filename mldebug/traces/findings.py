"""What the ranks' traces show, as `Finding`s for the one judge (explain hands them in).

- `trace_split` (info): per rank, where the profiled steps went: compute, communication
  (and how much of it nothing computed beside: exposed), idle. Communication is a property
  of the job, not a fault: never a warning by itself.
- `straggler` (warning): one rank arrives last at most collectives, and the others'
  waiting for it is a visible part of their step (match.py: never by comparing clocks).
- `input_bound` (warning): the ranks wait for the DataLoader's next batch a large part
  of their step.
- `host_sync` (warning): the ranks wait for the device (`.item()`, synchronize) a large
  part of their step.

The kinds are the agent's (analysis/timing.py), so a view words them alike.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from math import exp, lgamma, log, log1p

from mldebug.model import SEVERITY_INFO, SEVERITY_WARNING, CollectiveRef, Finding
from mldebug.ranges import format_ranks
from mldebug.traces.match import Arrival, arrivals
from mldebug.traces.model import ON_DEVICE, RankTrace

KIND_SPLIT = "trace_split"
KIND_STRAGGLER = "straggler"  # analysis/timing.py's kinds
KIND_INPUT_BOUND = "input_bound"
KIND_HOST_SYNC = "host_sync"
SOURCE_TRACE = "profiler_trace"

# A straggler: last at this share of the matched collectives at least (and at MIN_LAST of
# them), so unlikely by chance that a healthy job's rotating last arrival cannot pass
# (a one-sided binomial test against 1/ranks, MAX_CHANCE), with the others' wait for it
# at least WAIT_SHARE of their median step.
LAST_SHARE = 0.6
MIN_LAST = 3
MAX_CHANCE = 0.01
WAIT_SHARE = 0.05
# A collective where the others waited less than this share of their step had no late
# rank (every rank came at about the same time): it is left out of the count.
TIE_SHARE = 0.02
INPUT_SHARE = 0.3  # of the step waiting for the next batch
SYNC_SHARE = 0.2  # of the step waiting for the device
SHOWN_RANKS = 8  # ranks the split names one by one


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _ms(microseconds: float) -> str:
    ms = microseconds / 1000
    return f"{ms:.0f} ms" if ms >= 10 else f"{ms:.1f} ms"


def _pct(share: float) -> str:
    return f"{100 * share:.0f}%"


def _tail(n: int, k: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p), in logs (n may be 200,000 collectives)."""
    if k <= 0:
        return 1.0
    if p >= 1.0:
        return 1.0
    head = lgamma(n + 1)
    logp, logq = log(p), log1p(-p)
    return min(
        1.0,
        sum(
            exp(head - lgamma(i + 1) - lgamma(n - i + 1) + i * logp + (n - i) * logq)
            for i in range(k, n + 1)
        ),
    )


def _rank_line(t: RankTrace) -> str:
    return (
        f"rank {t.rank} {_ms(t.step)}: compute {_pct(t.share(t.compute))}, "
        f"comm {_pct(t.share(t.comm))} ({_pct(t.share(t.exposed))} exposed), "
        f"idle {_pct(t.share(t.idle))}"
    )


SHOWN_ARRIVALS = 64  # collectives whose late rank the split's facts list


def _late_facts(found: list[Arrival]) -> list[tuple[str, str]]:
    """Who came last at each matched collective (the first SHOWN_ARRIVALS), and how often
    each rank did: the late rank per collective, whether or not it makes a straggler."""
    if not found:
        return []
    counts = Counter(a.last for a in found)
    return [
        ("last_by_rank", ", ".join(f"rank {r}: {n}" for r, n in sorted(counts.items()))),
        (
            "last_per_collective",
            "; ".join(
                f"{a.label}: rank {a.last} (+{_ms(a.waited)})" for a in found[:SHOWN_ARRIVALS]
            ),
        ),
    ]


def split(traces: list[RankTrace], found: Sequence[Arrival] = ()) -> Finding:
    ranks = tuple(t.rank for t in traces)
    where = "device kernels" if any(t.where == ON_DEVICE for t in traces) else "host ops"
    backends = sorted({t.backend for t in traces if t.backend})
    step = _median([t.step for t in traces])
    share = {
        name: _median([t.share(getattr(t, name)) for t in traces])
        for name in ("compute", "comm", "exposed", "idle")
    }
    count = len(traces)
    summary = (
        f"{'1 rank' if count == 1 else f'{count} ranks'} profiled"
        f"{' (' + ', '.join(backends) + ')' if backends else ''}: median step {_ms(step)}; "
        f"compute {_pct(share['compute'])}, communication {_pct(share['comm'])} "
        f"({_pct(share['exposed'])} with no compute beside it), idle {_pct(share['idle'])}"
    )
    shown = sorted(traces, key=lambda t: t.rank)
    if len(shown) > SHOWN_RANKS:  # the extremes: most idle and most exposed first
        shown = sorted(traces, key=lambda t: -(t.idle + t.exposed) / max(t.window, 1))
        shown = sorted(shown[:SHOWN_RANKS], key=lambda t: t.rank)
    worlds = {t.world_size for t in traces if t.world_size}
    missing = ""
    if len(worlds) == 1:
        world = worlds.pop()
        absent = sorted(set(range(world)) - set(ranks))
        if absent:
            missing = f"; no trace of rank {format_ranks(absent)} (world size {world})"
    facts = [
        ("ranks", format_ranks(ranks)),
        ("timed", where),
        ("step_ms", f"{step / 1000:.1f}"),
        *((f"rank{t.rank}", _rank_line(t)) for t in shown),
        *_late_facts(list(found)),
    ]
    return Finding(
        kind=KIND_SPLIT,
        ranks=ranks,
        summary=summary,
        detail="; ".join(_rank_line(t) for t in shown) + missing,
        severity=SEVERITY_INFO,
        sources=(SOURCE_TRACE,),
        facts=tuple(facts),
        confidence=0.5,
    )


def straggler(traces: list[RankTrace], found: list[Arrival]) -> Finding | None:
    step_all = _median([t.step for t in traces])
    found = [a for a in found if a.waited >= TIE_SHARE * step_all]
    if len(traces) < 2 or not found:
        return None
    last = Counter(a.last for a in found)
    rank, times = last.most_common(1)[0]
    n = len(found)
    chance = min(1.0, len(traces) * _tail(n, times, 1 / len(traces)))
    if times < MIN_LAST or times / n < LAST_SHARE or chance > MAX_CHANCE:
        return None
    waits = [a.waited for a in found if a.last == rank]
    others = [t for t in traces if t.rank != rank]
    step = _median([t.step for t in others])
    steps = max(1, len(next(t for t in traces if t.rank == rank).steps))
    per_step = sum(waits) / steps
    if step <= 0 or per_step < WAIT_SHARE * step:
        return None
    mine = next(t for t in traces if t.rank == rank)
    ratio = mine.compute / max(1.0, _median([t.compute for t in others]))
    ops = Counter(a.op for a in found if a.last == rank)
    op = ops.most_common(1)[0][0]
    waiting = tuple(t.rank for t in others)
    return Finding(
        kind=KIND_STRAGGLER,
        ranks=(rank,),
        summary=(
            f"rank {rank} arrives last at {times} of {n} collectives in the profiled steps: "
            f"the others wait about {_ms(per_step)} a step for it "
            f"({_pct(per_step / step)} of their step); it computes "
            f"{ratio:.2f}x the others' median"
        ),
        detail=_late_detail(rank, found),
        severity=SEVERITY_WARNING,
        waiting=waiting,
        waited=per_step / 1e6,
        collective=CollectiveRef(group=found[0].group, op=op),
        sources=(SOURCE_TRACE,),
        recipe="stragglers",
        facts=(
            ("last_at", f"{times}/{n}"),
            ("wait_per_step_ms", f"{per_step / 1000:.1f}"),
            ("compute_ratio", f"{ratio:.2f}"),
            ("chance", f"{chance:.2g}"),
        ),
        confidence=0.8,
    )


def _late_detail(rank: int, found: list[Arrival]) -> str:
    """Where the rank came last (the longest waits first), and who came last elsewhere."""
    mine = sorted((a for a in found if a.last == rank), key=lambda a: -a.waited)
    said = ", ".join(f"{a.label} ({_ms(a.waited)})" for a in mine[:3])
    others = Counter(a.last for a in found if a.last != rank)
    rest = ", ".join(f"rank {r} at {n}" for r, n in sorted(others.items()))
    return f"last at {said}" + (f"; last elsewhere: {rest}" if rest else "")


def _host_wait(
    traces: list[RankTrace], part: str, limit: float, kind: str, what: str, recipe: str
) -> Finding | None:
    shares = {t.rank: t.share(getattr(t, part)) for t in traces}
    ranks = tuple(sorted(r for r, s in shares.items() if s >= limit))
    if not ranks:
        return None
    median = _median([shares[r] for r in ranks])
    who = (
        "every rank"
        if len(ranks) == len(traces) and len(traces) > 1
        else (f"rank {format_ranks(ranks)}")
    )
    compute = _median([t.share(t.compute) for t in traces if t.rank in ranks])
    return Finding(
        kind=kind,
        ranks=ranks,
        summary=(
            f"{who} spends a median {_pct(median)} of its profiled steps {what} "
            f"(compute {_pct(compute)})"
        ),
        severity=SEVERITY_WARNING,
        sources=(SOURCE_TRACE,),
        recipe=recipe,
        facts=((f"{part}_share", f"{median:.2f}"),),
        confidence=0.8,
    )


def trace_findings(traces: list[RankTrace]) -> list[Finding]:
    """Every finding the traces support; the split always (what a profile is for)."""
    if not traces:
        return []
    found = arrivals(traces)
    out = [split(traces, found)]
    for finding in (
        straggler(traces, found),
        _host_wait(
            traces,
            "data",
            INPUT_SHARE,
            KIND_INPUT_BOUND,
            "waiting for the DataLoader's next batch",
            "input-bound",
        ),
        _host_wait(
            traces,
            "sync",
            SYNC_SHARE,
            KIND_HOST_SYNC,
            "waiting for the device (.item(), synchronize)",
            "host-sync",
        ),
    ):
        if finding is not None:
            out.append(finding)
    return out
