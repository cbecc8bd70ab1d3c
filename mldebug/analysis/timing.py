"""Slow jobs: who is the straggler, and where each rank's step time goes (the agent's view).

In synchronous training every rank's step takes as long as the slowest one's, so step times
cannot name the straggler. What differs is how the time is spent: the straggler waits least
inside collectives, arrives last at them (analysis/timing_arrival.py), and its work between
collectives is the longest, step after step (analysis/timing_evidence.py says how sure). From the `timing` section of each rank's state.json:

  * `straggler`: one rank (or two) arrives last at most collectives the others wait at, the
    others wait for it a sizeable share of their step, and its work takes longer;
  * `input_bound`: the straggler's extra time is spent waiting for its DataLoader, or every
    rank waits for data a large share of each step;
  * `comm_bound`: every rank spends most of its step inside collectives and nobody is late;
  * `host_sync`: ranks blocked at host syncs (`.item()` on a CUDA tensor...) a large share.

Medians over the window's steps, never sums: a checkpoint pause or a GC pause on one step,
warm-up (the first step is never in the window) and ±10% jitter move no median far.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from mldebug.analysis import timing_evidence as evidence
from mldebug.analysis import timing_hold as hold
from mldebug.analysis.timing_arrival import Arrival, CallRecord, arrivals
from mldebug.analysis.timing_comm import comm_bound_finding, share_growth
from mldebug.analysis.timing_flight import FlightVerdict, judge_flight
from mldebug.model import SEVERITY_WARNING, STATE_EXITED, Finding, RankView
from mldebug.model.timing import (
    RankTiming,
    StepTiming,
    TimingRow,
    TimingTable,
)
from mldebug.ranges import format_ranks

KIND_STRAGGLER = "straggler"
KIND_INPUT_BOUND = "input_bound"
KIND_COMM_BOUND = "comm_bound"  # analysis/timing_comm.py words it
KIND_HOST_SYNC = "host_sync"

MIN_STEPS = 8  # steps in each rank's window before anything is judged
WARMUP_STEPS = hold.WARMUP_STEPS  # steps before this one are left out of the all-rank checks
# A straggler: slower outside collectives step after step than chance allows (a rank-sum
# test, analysis/timing_evidence.py), the others wait for it this share of their step...
WAIT_SHARE = 0.05
WORK_RATIO = 1.05  # ...and its work between collectives is this much longer
# The run's decayed means (analysis/timing_hold.py) are measured over hundreds of steps: their
# error is a fraction of a percent, so a lower bar is not crossed by noise, and a rank that
# costs the others 3-5% of every step (1.1x of half the step) is named steadily.
HELD_WAIT_SHARE = 0.03
HELD_WORK_RATIO = 1.03
LATE_SHARE = 0.02  # a collective someone waited at: lateness over this share of a step
LATE_MIN = 0.001  # ...and over a millisecond
DATA_SHARE = 0.25  # every rank waits for data this share of its step: input-bound
COMM_SHARE = 0.5  # every rank spends this share of its step in collectives: comm-bound
SYNC_SHARE = 0.2  # a rank blocked at host syncs this share of its step
FRESH_STEPS = 5  # a window whose last step ended more than this many steps ago (and
FRESH_MIN = 10.0  # ...this many seconds) before the heartbeat is old: the job stopped stepping


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2


@dataclass(frozen=True)
class _Split:
    """One rank's window, as medians over its steps."""

    rank: int
    timing: RankTiming
    step: float  # median wall seconds
    collective: float  # median seconds a step inside collectives
    data: float
    sync: float
    work: float  # median seconds a step outside collectives (its own work)
    shares: tuple[float, float, float, float]  # median shares: collective, data, sync, compute
    # The data wait's median share, less the run-queue delay inside the wait: a busy node
    # stretches a loader's sleeps and reads (agent/runqueue.py); where the delay is not
    # known, shares[1].
    own_data_share: float

    @property
    def steps(self) -> tuple[StepTiming, ...]:
        return self.timing.steps


def _share(steps: Sequence[StepTiming], part: Callable[[StepTiming], float]) -> float:
    return _median([part(s) / s.wall for s in steps if s.wall > 0])


def _split(rank: int, timing: RankTiming) -> _Split:
    steps = timing.steps
    shares = (
        _share(steps, lambda s: s.collective),
        _share(steps, lambda s: s.data),
        _share(steps, lambda s: s.sync),
        _share(steps, lambda s: s.compute),
    )
    return _Split(
        rank,
        timing,
        _median([s.wall for s in steps]),
        _median([s.collective for s in steps]),
        _median([s.data for s in steps]),
        _median([s.sync for s in steps]),
        _median([s.wall - s.collective for s in steps]),
        shares,
        _share(steps, lambda s: s.own_data),
    )


def _fresh(view: RankView) -> RankTiming | None:
    """The rank's timing window while it still steps; None for a stopped or exited rank."""
    agent = view.agent
    if agent is None or agent.timing is None or view.state == STATE_EXITED:
        return None
    steps = agent.timing.steps
    if not steps:
        return None
    last = steps[-1]
    age = agent.time - (last.start + last.wall)
    if age > max(FRESH_MIN, FRESH_STEPS * _median([s.wall for s in steps])):
        return None
    return agent.timing


def _splits(views: Sequence[RankView]) -> dict[int, _Split]:
    found = {}
    for view in views:
        timing = _fresh(view)
        if timing is not None:
            found[view.rank] = _split(view.rank, timing)
    return found


def _records(splits: dict[int, _Split]) -> list[CallRecord]:
    return [
        CallRecord(rank, c.group, c.seq, c.entered, c.completed, c.op)
        for rank, split in splits.items()
        for c in split.timing.calls
        if not c.asynchronous
    ]


def _waited_at(found: list[Arrival], step: float) -> list[Arrival]:
    floor = max(LATE_MIN, LATE_SHARE * step)
    return [a for a in found if a.lateness >= floor]


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 10 else f"{seconds:.1f} s"


def _ago(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def _pct(share: float) -> str:
    return f"{share * 100:.0f}%"


def _loader_text(timing: RankTiming) -> tuple[str, str | None]:
    """The DataLoader the rank waited on most: its words and its line."""
    if not timing.loaders:
        return "its DataLoader", None
    loader = max(timing.loaders, key=lambda entry: entry.wait)
    parts = [loader.dataset or "?"]
    if loader.num_workers is not None:
        parts.append(f"num_workers={loader.num_workers}")
    where = f" at {loader.site}" if loader.site else ""
    return f"DataLoader({', '.join(parts)}){where}", loader.site


@dataclass(frozen=True)
class TimingVerdict:
    table: TimingTable | None
    findings: tuple[Finding, ...] = ()


def _stragglers(
    splits: dict[int, _Split], waited: list[Arrival]
) -> tuple[evidence.Evidence | None, dict[int, float]]:
    """The ranks the rank-sum test names (analysis/timing_evidence.py), and each rank's
    share of the collectives the others waited at that it arrived at last (the words)."""
    counts = Counter(a.last for a in waited)
    shares = {rank: counts.get(rank, 0) / len(waited) for rank in splits} if waited else {}
    if len(splits) < 2:
        return None, shares
    return evidence.judge({rank: split.steps for rank, split in splits.items()}), shares


def _straggler_finding(
    found: evidence.Evidence,
    splits: dict[int, _Split],
    waited: list[Arrival],
    shares: dict[int, float],
    detail: str | None = None,
    bars: tuple[float, float] = (WAIT_SHARE, WORK_RATIO),
) -> Finding | None:
    """`splits`: the window's medians, or the run's decayed means (`detail` says so, `bars`
    are then theirs)."""
    late = list(found.late)
    others = [s for r, s in splits.items() if r not in late]
    slow = [splits[r] for r in late]
    if not others:
        return None
    others_step = _median([s.step for s in others])
    wait = _median([s.collective for s in others]) - max(s.collective for s in slow)
    others_work = _median([s.work for s in others])
    work = min(s.work for s in slow)
    if others_step <= 0 or others_work <= 0:
        return None
    ratio = work / others_work
    if wait < bars[0] * others_step or ratio < bars[1]:
        return None
    if detail is None and len(late) == 1:  # the window's: judged less the node's doing too
        held_off = _excess_delay(late[0], splits, wait)
        if wait - held_off < bars[0] * others_step or work - held_off < bars[1] * others_work:
            return None
    ops = Counter(a.op or "collective" for a in waited if a.last in late)
    op = ops.most_common(1)[0][0] if ops else "collective"
    share = sum(shares.get(r, 0.0) for r in late)
    who = f"rank {late[0]}" if len(late) == 1 else f"ranks {format_ranks(late)}"
    one = len(late) == 1
    tail = (
        f"{'arrives' if one else 'arrive'} last at {_pct(share)} of the {op} calls the others "
        f"wait at; the others wait a median {_ms(wait)} a step for {'it' if one else 'them'} "
        f"({_pct(wait / others_step)} of their step time)"
    )
    head = f"{who} {tail}"
    # Its extra time spent waiting for its DataLoader: the input, not the compute, is slow.
    extra_data = min(s.data for s in slow) - _median([s.data for s in others])
    if extra_data >= 0.5 * (work - others_work) and extra_data > 0:
        text, site = _loader_text(slow[0].timing)
        return Finding(
            KIND_INPUT_BOUND,
            tuple(late),
            f"{who} {'waits' if one else 'wait'} for data a median "
            f"{_pct(slow[0].shares[1])} of each step, {_ms(extra_data)} more than the median "
            f"rank, from {text}; the others wait for {'it' if one else 'them'} in {op}",
            location=site,
            recipe="input-bound",
            severity=SEVERITY_WARNING,
            detail=f"only {who} is input-bound: {head}",
        )
    hot = slow[0].timing.work[0].site if slow[0].timing.work else None
    summary = f"{who} {'is the straggler: it' if one else 'are the stragglers: they'} "
    summary += f"{tail}; {'its' if one else 'their'} work between collectives takes {ratio:.2f}x the median rank's"
    if hot:
        summary += f"; its main thread is mostly at {hot}"
    return Finding(
        KIND_STRAGGLER,
        tuple(late),
        summary,
        location=hot,
        recipe="stragglers",
        severity=SEVERITY_WARNING,
        detail=detail or _sure(found, late, len(splits), len(waited)),
    )


def _flight_shares(verdict: FlightVerdict, splits: dict[int, _Split]) -> dict[int, float]:
    counts = Counter(a.last for a in verdict.arrivals)
    total = len(verdict.arrivals) or 1
    return {rank: counts.get(rank, 0) / total for rank in splits}


_PART_WORDS = {"work": "time outside collectives", "compute": "compute", "data": "data wait"}


def _sure(found: evidence.Evidence, late: list[int], ranks: int, waited: int) -> str:
    """How sure: the steps compared and the chance of that order with every rank alike."""
    chance = max(found.chance[r] for r in late)
    part = _PART_WORDS.get(found.part[late[0]], found.part[late[0]])
    return (
        f"{found.steps} steps compared across {ranks} ranks: its {part} ranks this high by "
        f"chance {_chance_text(chance)} when no rank differs; {waited} collectives the "
        "others waited at"
    )


def _chance_text(p: float) -> str:
    return "less than once in a million" if p < 1e-6 else f"once in {1 / p:,.0f}"


def _step_delay(split: _Split) -> float | None:
    """The rank's median run-queue delay a step (agent/runqueue.py); None: not known."""
    known = [s.delay for s in split.steps if s.delay is not None]
    return _median(known) if known and len(known) == len(split.steps) else None


def _excess_delay(rank: int, splits: dict[int, _Split], lateness: float) -> float:
    """The run-queue delay a step the late rank had beyond every other rank's that its
    lateness does not account for (0 where not known). On a busy node every rank is held
    off its CPU for a share of its work; a rank with more work is held that share of its
    extra work more (a straggler stays one), a rank the scheduler held back more than the
    others is late by that excess alone (the node's doing, not the rank's). Beyond the most
    any other rank had, not their median: among several ranks, a delay above their median
    is common by chance, and a real straggler is not to lose its name to it."""
    late = _step_delay(splits[rank]) if rank in splits else None
    others = [_step_delay(s) for r, s in splits.items() if r != rank]
    known = [d for d in others if d is not None]
    if late is None or not known or len(known) < len(others):
        return 0.0
    step = _median([s.step for r, s in splits.items() if r != rank])
    typical = _median(known)
    share = min(1.0, typical / step) if step > 0 else 0.0  # of a step spent held off a CPU
    return max(0.0, late - max(known) - share * lateness)


def _flight_lateness(verdict: FlightVerdict, splits: dict[int, _Split]) -> float:
    """How long the others waited a step for the late rank, less its excess run-queue
    delay (_excess_delay)."""
    rank = verdict.rank
    if rank is None:
        return verdict.lateness
    return verdict.lateness - _excess_delay(rank, splits, verdict.lateness)


def _flight_finding(verdict: FlightVerdict, splits: dict[int, _Split]) -> Finding | None:
    """DDP's C++ all-reduces, from the Flight Recorder rows: the rank late at most steps."""
    rank = verdict.rank
    if rank is None or rank not in splits:
        return None
    step = _median([s.step for r, s in splits.items() if r != rank])
    if step <= 0 or _flight_lateness(verdict, splits) < WAIT_SHARE * step:
        return None
    hot = splits[rank].timing.work[0].site if splits[rank].timing.work else None
    summary = (
        f"rank {rank} is the straggler: it enters the {verdict.op} calls the Python trace does "
        f"not see (DDP's, in torch's Flight Recorder) last at {verdict.late_steps} of "
        f"{verdict.steps} steps; the others wait a median {_ms(verdict.lateness)} a step for it "
        f"({_pct(verdict.lateness / step)} of their step time)"
    )
    if hot:
        summary += f"; its main thread is mostly at {hot}"
    return Finding(
        KIND_STRAGGLER,
        (rank,),
        summary,
        location=hot,
        recipe="stragglers",
        severity=SEVERITY_WARNING,
        detail=f"{len(verdict.arrivals)} Flight Recorder collectives compared across "
        f"{len(splits)} ranks: late that often comes by chance {_chance_text(verdict.chance)} "
        "when no rank differs",
    )


def _all_input_bound(splits: dict[int, _Split]) -> Finding | None:
    if not all(s.own_data_share >= DATA_SHARE for s in splits.values()):
        return None
    ranks = sorted(splits)
    share = _median([s.own_data_share for s in splits.values()])
    text, site = _loader_text(splits[ranks[0]].timing)
    return Finding(
        KIND_INPUT_BOUND,
        tuple(ranks),
        f"all {len(ranks)} ranks wait for data a median {_pct(share)} of each step, from {text}: "
        "the input pipeline is the limit, not the compute",
        location=site,
        recipe="input-bound",
        severity=SEVERITY_WARNING,
    )


def _comm_bound(splits: dict[int, _Split]) -> Finding | None:
    if len(splits) < 2 or not all(s.shares[0] >= COMM_SHARE for s in splits.values()):
        return None
    ops = Counter(c.op for s in splits.values() for c in s.timing.calls)
    op = ops.most_common(1)[0][0] if ops else "collectives"
    share = _median([s.shares[0] for s in splits.values()])
    growth = share_growth({r: s.timing.blocks for r, s in splits.items()})
    return comm_bound_finding(sorted(splits), share, op, growth)


def _host_sync(splits: dict[int, _Split]) -> Finding | None:
    ranks = sorted(r for r, s in splits.items() if s.shares[2] >= SYNC_SHARE)
    if not ranks:
        return None
    sites: Counter[str] = Counter()
    for rank in ranks:
        for site in splits[rank].timing.syncs:
            sites[site.site] += site.seconds  # type: ignore[assignment]
    top = [site for site, _ in sites.most_common(3)]
    share = _median([splits[r].shares[2] for r in ranks])
    who = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {format_ranks(ranks)}"
    return Finding(
        KIND_HOST_SYNC,
        tuple(ranks),
        f"{who} {'is' if len(ranks) == 1 else 'are'} blocked at host syncs (.item(), .cpu(), "
        f"cuda.synchronize) a median {_pct(share)} of each step"
        + (f", at {', '.join(top)}" if top else ""),
        location=top[0] if top else None,
        recipe="host-sync",
        severity=SEVERITY_WARNING,
    )


def _table(
    splits: dict[int, _Split], shares: dict[int, float], late: list[int], compared: int
) -> TimingTable:
    order = sorted(shares, key=lambda rank: -shares[rank])
    rows = tuple(
        TimingRow(
            rank=rank,
            step_time=split.step,
            waiting=split.shares[0],
            data=split.shares[1],
            sync=split.shares[2],
            compute=split.shares[3],
            last_share=shares.get(rank),
            arrival=order.index(rank) + 1 if rank in shares else None,
            step_times=tuple(s.wall for s in split.steps),
            straggler=rank in late,
        )
        for rank, split in sorted(splits.items())
    )
    note = f"{compared} collectives the others waited at, compared" if compared else ""
    return TimingTable("agent", rows, compared, note)


def _held_splits(held: hold.Held, splits: dict[int, _Split]) -> dict[int, _Split]:
    """The run's decayed means in the window's form: judged by the same bars, in the same
    words."""
    found = {}
    for rank, split in splits.items():
        m = held.means[rank]
        parts = (m.collective, m.data, m.sync, m.compute)
        shares = tuple(part / m.step if m.step > 0 else 0.0 for part in parts)
        found[rank] = _Split(
            rank,
            split.timing,
            m.step,
            m.collective,
            m.data,
            m.sync,
            m.work,
            shares,  # type: ignore[arg-type]
            m.own_data / m.step if m.step > 0 else 0.0,
        )
    return found


def _held_straggler(
    held: hold.Held, ready: dict[int, _Split], waited: list[Arrival], shares: dict[int, float]
) -> Finding | None:
    """The straggler the run's decayed evidence names, when the window alone does not."""
    found = evidence.Evidence(held.late, held.chance, held.part, 0)
    splits = _held_splits(held, ready)
    for late in _each_way(found):
        sure = _held_sure(held, late, len(ready), len(waited))
        bars = (HELD_WAIT_SHARE, HELD_WORK_RATIO)
        finding = _straggler_finding(late, splits, waited, shares, sure, bars)
        if finding is not None:
            return finding
    return None


def _held_sure(held: hold.Held, found: evidence.Evidence, ranks: int, waited: int) -> str:
    chance = max(held.chance[r] for r in found.late)
    part = _PART_WORDS.get(held.part[found.late[0]], held.part[found.late[0]])
    return (
        f"{held.blocks} blocks of steps compared across {ranks} ranks, the older weighing "
        f"less: its {part} ranks this high by chance {_chance_text(chance)} at most when no "
        f"rank differs; {waited} collectives the others waited at"
    )


def _each_way(found: evidence.Evidence) -> list[evidence.Evidence]:
    """The ranks the test names together, then each alone, the surest first. The rank-sum
    test says which ranks stand out, not by how much: among 4 ranks on a busy node one can
    stand out in a part that costs the others nothing (its data wait a little longer, every
    block), and the pair then fails the bars that the straggler beside it clears alone."""
    if len(found.late) < 2:
        return [found]
    alone = sorted(found.late, key=lambda r: found.chance[r])
    return [found, *(replace(found, late=(rank,)) for rank in alone)]


def _window_straggler(
    found: evidence.Evidence,
    ready: dict[int, _Split],
    waited: list[Arrival],
    shares: dict[int, float],
) -> Finding | None:
    for late in _each_way(found):
        finding = _straggler_finding(late, ready, waited, shares)
        if finding is not None:
            return finding
    return None


def _window_since(ready: dict[int, _Split], rank: int, part: str) -> hold.Since | None:
    """Since which step of the window the rank has stood out (in `part`)."""
    rows = evidence.common_steps({r: s.steps for r, s in ready.items()})
    value = dict(evidence.PARTS).get(part, evidence.PARTS[0][1])
    ranks = sorted(ready)
    if not rows:
        return None
    i, middle = ranks.index(rank), (len(ranks) + 1) / 2
    excess = [hold.places([value(row[r]) for r in ranks])[i] - middle for row in rows]
    first = rows[hold.since_of(excess, hold.since_margin(len(ranks)))][rank]
    return hold.Since(first.step, first.start)


def _with_since(
    finding: Finding,
    held: hold.Held | None,
    found: evidence.Evidence | None,
    ready: dict[int, _Split],
    now: dict[int, float],
) -> Finding:
    """The slow rank's finding with since when: from the run's blocks where they name it,
    else from the window."""
    rank = finding.ranks[0]
    since = held.since.get(rank) if held is not None else None
    if since is None and found is not None and rank in found.late:
        since = _window_since(ready, rank, found.part.get(rank, "work"))
    if since is None:
        return finding
    ago = max(0.0, now.get(rank, since.start) - since.start)
    return replace(
        finding,
        since=f"since step {since.step}, {_ago(ago)} ago",
        facts=(*finding.facts, ("since_step", str(since.step)), ("since_s", f"{ago:.1f}")),
    )


def judge_timing(views: Sequence[RankView]) -> TimingVerdict:
    """The timing table and the timing findings of one snapshot's ranks: the window's
    evidence, and the run's (analysis/timing_hold.py) so that a verdict holds."""
    splits = _splits(views)
    if not splits:
        return TimingVerdict(None)
    ready = {r: s for r, s in splits.items() if len(s.steps) >= MIN_STEPS}
    if len(ready) < len(splits) or len(ready) < 1:
        return TimingVerdict(_table(splits, {}, [], 0))
    now = {v.rank: v.agent.time for v in views if v.agent is not None}
    step = _median([s.step for s in ready.values()])
    waited = _waited_at(arrivals(_records(ready)), step)
    # The warm-up is left out once the steps after it can speak: on a busy node one rank's
    # DataLoader workers may start later than another's, and its first steps' data wait
    # named a healthy job's rank the straggler. Before then the first steps are all there is.
    judged = _settled(ready) or ready
    found, shares = _stragglers(judged, waited)
    held = hold.judge_held({r: s.timing.blocks for r, s in ready.items()})
    late = list(found.late) if found is not None else []
    findings: list[Finding] = []
    if late and hold.passing(held, late):
        late = []  # the window's burst: the run's blocks rank these no higher than chance
    straggler = (
        _window_straggler(found, judged, waited, shares) if found is not None and late else None
    )
    if straggler is None and held is not None and held.late:
        straggler = _held_straggler(held, ready, waited, shares)
    if straggler is None:
        flight = judge_flight({r: s.timing for r, s in ready.items()})
        straggler = _flight_finding(flight, ready) if flight is not None else None
        if straggler is not None:
            shares = _flight_shares(flight, ready) if flight is not None else shares
            waited = waited or list(flight.arrivals if flight is not None else ())
    if straggler is not None:
        late = list(straggler.ranks)
        findings.append(_with_since(straggler, held, found, ready, now))
    else:
        late = []
        for check in (_input_bound_all(ready, held), _comm_bound(ready)):
            if check is not None:
                findings.append(check)
    sync = _host_sync(ready) or (_host_sync(_held_splits(held, ready)) if held else None)
    if sync is not None:
        findings.append(sync)
    return TimingVerdict(_table(ready, shares, late, len(waited)), tuple(findings))


def _settled(ready: dict[int, _Split]) -> dict[int, _Split] | None:
    """The window's steps after the warm-up (DataLoader workers starting make the first
    steps wait for data on every rank): None with too few."""
    steps = {r: [s for s in split.steps if s.step >= WARMUP_STEPS] for r, split in ready.items()}
    if any(len(s) < MIN_STEPS for s in steps.values()):
        return None
    return {r: _split(r, replace(ready[r].timing, steps=tuple(s))) for r, s in steps.items()}


def _newest_half(splits: dict[int, _Split]) -> dict[int, _Split]:
    return {
        r: _split(r, replace(s.timing, steps=s.steps[len(s.steps) // 2 :]))
        for r, s in splits.items()
    }


def _input_bound_all(ready: dict[int, _Split], held: hold.Held | None) -> Finding | None:
    """Every rank waits for data in the window's newest half (a wait that is over is no
    limit), and in the whole window after the warm-up or over the run (decayed)."""
    settled = _settled(ready)
    if settled is None or _all_input_bound(_newest_half(settled)) is None:
        return None
    found = _all_input_bound(settled)
    if found is None and held is not None:
        found = _all_input_bound(_held_splits(held, ready))
    return found


def timing_findings(views: Sequence[RankView]) -> list[Finding]:
    """The findings alone (analysis/findings.py registers these)."""
    return list(judge_timing(views).findings)
