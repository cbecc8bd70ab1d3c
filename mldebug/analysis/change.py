"""Change over time: a job (or some of its ranks) whose steps got slower and stayed slower.

The straggler analyses compare ranks with each other; a job whose every rank slowed down at
step 5,000 has no straggler. Each rank's agent keeps its whole run in blocks of step medians
(agent/step_history.py; where the program counts no step, blocks of its collectives: the
cadence). On the log of the blocks' step time:

  1. the noise is the median jump between neighbouring blocks (a level shift is one jump,
     so it does not count as noise), never under JITTER;
  2. the change point is where a CUSUM statistic (before/after mean difference weighed by
     how many blocks each side holds) is largest, over log times clipped near the median so
     one odd block cannot pull it;
  3. it is a lasting slowdown only when the medians either side differ by MIN_RATIO and by
     SEPARATION times the noise of two medians, nearly every block since (CONSISTENT) and
     the newest one sit above the midway level, and the change has lasted MIN_UNITS units
     and MIN_SECONDS seconds.

A step time that rises gradually (still rising after the change point, or already rising
before it) "grows gradually": from where the slope left the level before, to its level now.

A block is a median of BLOCK steps: one evaluation or checkpoint pause moves it little, and a
pause that spans blocks is over by the newest one. Warm-up is faster later, never slower, and
speed-ups are not findings. benchmarks/bench_change.py measures how soon a change is named and
the false alarms of healthy runs.

Which part grew (data wait, compute, collectives, host sync) says why: ranks whose step grew
mostly outside collectives are where the change is; ranks whose growth is waiting in
collectives wait for them.

A busier node is not a slower job. Each block carries its steps' median run-queue delay (how
long the kernel held the training thread, and gloo's threads while it waited in collectives,
off a CPU: agent/runqueue.py). The change is graded on the step less the growth of that
delay (the median over the changed ranks): it is a warning only when what is left is still
WARN_RATIO times the step before. Where that delay grew by BUSIER_SHARE of the step's growth
or more, and on every changed rank by EVERY_SHARE of it, the finding says the node got busier
(its `cause` fact), at info unless what is left is still a warning's worth. A collective
ends for every member when its last member's part is done: a rank's wait in collectives also
holds its peers' held threads (a late arrival, or a ring's step that waits for the other
side's). So the growth of its collectives is explained by the most any peer's delay grew, on
top of its own (the peer's held time and its own come one after the other in its step),
never more than that growth, nor more than its step's. A slower network, with no delay
grown, is explained by nothing.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from mldebug.model import SEVERITY_INFO, SEVERITY_WARNING, STATE_EXITED, Finding, RankView
from mldebug.model.timing import UNIT_CALLS, RankTiming, StepBlock
from mldebug.ranges import format_ranks

KIND_SLOWDOWN = "slowdown"
RECIPE = "slowdown-over-time"

MIN_BEFORE = 4  # blocks before a change
MIN_AFTER = 3  # blocks since
MIN_UNITS = 16  # steps (or collectives) since
MIN_SECONDS = 5.0  # seconds since
MIN_RATIO = 1.3  # the step (median) got this much longer: info
WARN_RATIO = 1.5  # ...this much: a warning (a busier machine makes a CPU job 1.3x slower)
SEPARATION = 5.0  # the difference of medians over the noise of two medians
JITTER = 0.03  # log-time noise floor between blocks (3%)
CONSISTENT = 0.8  # share of blocks since that are above the midway level
CLIP = 6.0  # noise widths around the median where log times are clipped for the search
MAX_RANKS = 64  # ranks searched at most (evenly spread): bounded work at 1,024 ranks
DRIFT = 0.5  # a rise of this share of the change (and of SEPARATION noise widths) between
DRIFT_BLOCKS = 3  # ...the first and last quarter since (this many blocks at least): gradual
OWN_SHARE = 0.5  # growth outside collectives over this share: the rank's own change
BUSIER_SHARE = 0.5  # the run-queue delay grew by this share of the step's growth (median)...
EVERY_SHARE = 0.25  # ...and by this share on every changed rank: the node got busier
CAUSE_NODE = "busier node"
CAUSE_JOB = "the job"
PARTS = ("data", "compute", "collective", "sync")
PART_WORDS = {
    "data": "waiting for data",
    "compute": "computing",
    "collective": "waiting in collectives",
    "sync": "blocked at host syncs",
}


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else 0.0


def _delay(blocks: Sequence[StepBlock]) -> float | None:
    """The blocks' median run-queue delay a unit, where every block knows it."""
    known = [b.delay for b in blocks if b.delay is not None]
    return _median(known) if known and len(known) == len(blocks) else None


def _part(block: StepBlock, name: str) -> float:
    return block.compute if name == "compute" else float(getattr(block, name))


@dataclass(frozen=True)
class Change:
    """One rank's lasting slowdown: from which unit on, the medians before and since."""

    rank: int
    since: int  # the first step (or collective) of the first slower block
    since_time: float
    before: float  # median seconds a unit
    after: float
    parts_before: tuple[float, ...]  # PARTS' medians
    parts_after: tuple[float, ...]
    units: int  # units since the change
    seconds: float  # seconds since the change
    gradual: bool = False  # rising before the change point or still rising since: a drift
    # The steps' median run-queue delay before and since (a busier node); None: not known
    delay_before: float | None = None
    delay_after: float | None = None

    @property
    def ratio(self) -> float:
        return self.after / self.before if self.before > 0 else math.inf

    @property
    def growth(self) -> tuple[float, ...]:
        return tuple(a - b for a, b in zip(self.parts_after, self.parts_before, strict=True))

    def share(self, part: str) -> float:
        """The part's share of the step's growth (0..1)."""
        grown = [max(0.0, g) for g in self.growth]
        total = sum(grown)
        return grown[PARTS.index(part)] / total if total > 0 else 0.0


def noise(logs: Sequence[float]) -> float:
    """The blocks' jitter on the log scale: the median jump between neighbours (a normal
    noise's sigma), never under JITTER."""
    jumps = [abs(b - a) for a, b in zip(logs, logs[1:], strict=False)]
    return max(JITTER, 1.4826 * _median(jumps) / math.sqrt(2)) if jumps else JITTER


def change_point(logs: Sequence[float], sigma: float) -> int | None:
    """The block where the mean level rises most (CUSUM), over clipped log times."""
    n = len(logs)
    if n < MIN_BEFORE + MIN_AFTER:
        return None
    middle = _median(logs)
    low, high = middle - CLIP * sigma, middle + CLIP * sigma
    clipped = [min(high, max(low, x)) for x in logs]
    total = sum(clipped)
    best, where, head = 0.0, None, 0.0
    for k in range(1, n):
        head += clipped[k - 1]
        if k < MIN_BEFORE or n - k < MIN_AFTER:
            continue
        rise = (total - head) / (n - k) - head / k
        score = rise * math.sqrt(k * (n - k) / n)
        if score > best:
            best, where = score, k
    return where


def _block_at(blocks: Sequence[StepBlock], at: int) -> int | None:
    """The first block that holds unit `at`, where there are enough blocks before it."""
    k = next((i for i, b in enumerate(blocks) if b.first + b.units > at), None)
    return k if k is not None and MIN_BEFORE <= k < len(blocks) else None


@dataclass(frozen=True)
class Peer:
    """How much a rank's run-queue delay a unit grew from another rank's change on
    (medians before and since)."""

    delay: float | None  # None: not known


def peer_growth(blocks: Sequence[StepBlock], at: int) -> Peer | None:
    """The rank's growth from unit `at` on; None where it has too few blocks before."""
    blocks = [b for b in blocks if b.wall > 0]
    k = _block_at(blocks, at)
    if k is None:
        return None
    old, new = _delay(blocks[:k]), _delay(blocks[k:])
    return Peer(new - old if old is not None and new is not None else None)


def rank_change(rank: int, blocks: Sequence[StepBlock], at: int | None = None) -> Change | None:
    """The rank's lasting slowdown, if its history shows one. `at`: the step another rank's
    change began at: this rank is judged there (the same rise and consistency), without the
    minimum length, which the other rank's change has met (its state may be a heartbeat
    older)."""
    blocks = [b for b in blocks if b.wall > 0]
    logs = [math.log(b.wall) for b in blocks]
    sigma = noise(logs)
    k = change_point(logs, sigma) if at is None else _block_at(blocks, at)
    if k is None:
        return None
    before, since = logs[:k], logs[k:]
    low, high = _median(before), _median(since)
    rise = high - low
    spread = sigma * 1.25 * math.sqrt(1 / len(before) + 1 / len(since))
    if rise < math.log(MIN_RATIO) or rise < SEPARATION * spread:
        return None
    midway = low + rise / 2
    if logs[-1] <= midway or sum(x > midway for x in since) < CONSISTENT * len(since):
        return None
    # the change began at the first block since that is above the midway level
    k += next(i for i, x in enumerate(since) if x > midway)
    first = blocks[k]
    units = sum(b.units for b in blocks[k:])
    seconds = units * _median([b.wall for b in blocks[k:]])  # a pause since is no length
    if at is None and (units < MIN_UNITS or seconds < MIN_SECONDS):
        return None
    old, new = blocks[:k], blocks[k:]
    edge = max(DRIFT_BLOCKS, (len(logs) - k) // 4)
    drift = max(rise * DRIFT, SEPARATION * sigma)
    gradual = len(logs) - k >= 2 * edge and (
        _median(logs[-edge:]) - _median(logs[k : k + edge]) > drift
        or _median(logs[max(0, k - edge) : k]) - low > drift
    )
    if gradual:  # where the slope began (back to the level before), and the level now
        for _ in range(2):  # the level before, then again without the slope's blocks
            while k > MIN_BEFORE and logs[k - 1] > low + max(3 * sigma, rise * 0.1):
                k -= 1
            low = _median(logs[:k])
        first, old, new = blocks[k], blocks[:k], blocks[-edge:]
    return Change(
        rank,
        first.first,
        first.start,
        _median([b.wall for b in old]),
        _median([b.wall for b in new]),
        tuple(_median([_part(b, p) for b in old]) for p in PARTS),
        tuple(_median([_part(b, p) for b in new]) for p in PARTS),
        units,
        seconds,
        gradual,
        _delay(old),
        _delay(new),
    )


@dataclass(frozen=True)
class Busier:
    """How much of a job's slowdown the run-queue delay explains."""

    grown: float  # seconds a step the delay grew (the changed ranks' median)
    before: float  # the steps' median delay before and since
    after: float
    left: float  # the step since, less the delay's growth, over the step before
    node: bool  # the delay is most of the growth, on every changed rank: the node got busier


def _explained(change: Change, peers: dict[int, Peer]) -> float:
    """The run-queue delay's growth that explains the rank's: its own, and for its wait
    in collectives (which ends when its peers' held threads are done), the most any
    peer's delay grew; never over its growth."""
    own = change.delay_after - change.delay_before  # type: ignore[operator]
    delays = [peer.delay for rank, peer in peers.items() if rank != change.rank]
    known = [delay for delay in delays if delay is not None]
    if not known:
        return own
    waited = change.growth[PARTS.index("collective")]
    late = min(max(0.0, max(known)), max(0.0, waited))
    return max(own, min(own + late, change.after - change.before))


def busier(
    found: Sequence[Change], before: float, after: float, peers: dict[int, Peer] | None = None
) -> Busier | None:
    """The slowdown judged on the step less its run-queue delay's growth; None where a
    changed rank does not know its delay. `peers`: each searched rank's growth from the
    change on, changed or not."""
    known = [c for c in found if c.delay_before is not None and c.delay_after is not None]
    if not known or len(known) < len(found) or before <= 0:
        return None
    grown = [_explained(c, peers or {}) for c in known]
    held = max(0.0, _median(grown))
    growth = after - before
    # the node, not one rank's neighbour: every changed rank's own delay grew
    own = min(c.delay_after - c.delay_before for c in known)  # type: ignore[operator]
    node = growth > 0 and held >= BUSIER_SHARE * growth and own >= EVERY_SHARE * growth
    return Busier(
        held,
        _median([c.delay_before for c in known]),  # type: ignore[misc]
        _median([c.delay_after for c in known]),  # type: ignore[misc]
        (after - held) / before,
        node,
    )


def _searched(views: Sequence[RankView]) -> list[tuple[int, RankTiming]]:
    found = [
        (v.rank, v.agent.timing)
        for v in views
        if v.agent is not None and v.agent.timing is not None and v.state != STATE_EXITED
    ]
    found = [(rank, t) for rank, t in found if len(t.history) >= MIN_BEFORE + MIN_AFTER]
    if len(found) > MAX_RANKS:
        stride = len(found) / MAX_RANKS
        found = [found[int(i * stride)] for i in range(MAX_RANKS)]
    return found


def changes(views: Sequence[RankView]) -> tuple[list[Change], int, str, dict[int, Peer]]:
    """Each searched rank's change (ranks without one left out), how many ranks were
    searched, the unit ("steps", or "collectives" where no step is counted), and each
    searched rank's growth from the change on."""
    searched = _searched(views)
    found = [c for rank, t in searched if (c := rank_change(rank, t.history)) is not None]
    peers: dict[int, Peer] = {}
    if found:  # the others judged where the change began: a job's ranks change together
        at = int(_median([c.since for c in found]))
        peers = {
            rank: grown for rank, t in searched if (grown := peer_growth(t.history, at)) is not None
        }
        named = {c.rank for c in found}
        found += [
            c
            for rank, t in searched
            if rank not in named and (c := rank_change(rank, t.history, at)) is not None
        ]
        found.sort(key=lambda c: c.rank)
    unit = "collectives" if searched and searched[0][1].history_unit == UNIT_CALLS else "steps"
    return found, len(searched), unit, peers


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 10 else f"{seconds:.1f} s"


def _where(change: Change) -> tuple[str, str]:
    """The part that grew most, and the words for how much of the growth it is."""
    part = max(PARTS, key=change.share)
    share = change.share(part)
    words = PART_WORDS[part]
    if share >= 0.8:
        return part, f"all of it {words}" if share >= 0.95 else f"most of it {words}"
    return part, f"{share * 100:.0f}% of it {words}"


def _loader(timing: RankTiming | None) -> tuple[str, str | None]:
    if timing is None or not timing.loaders:
        return "", None
    loader = max(timing.loaders, key=lambda entry: entry.wait)
    args = [loader.dataset or "?"]
    if loader.num_workers is not None:
        args.append(f"num_workers={loader.num_workers}")
    return f" (DataLoader({', '.join(args)}))", loader.site


def change_finding(views: Sequence[RankView]) -> Finding | None:
    """The job's lasting slowdown as one finding: the ranks where it is (their step grew
    outside collectives), the ranks that wait for them, when, how much and in what."""
    found, searched, unit, peers = changes(views)
    if not found:
        return None
    own = [c for c in found if 1 - c.share("collective") > OWN_SHARE] or found
    every = len(own) == searched and searched > 1
    ranks = tuple(sorted(c.rank for c in own))
    waiting = tuple(sorted(c.rank for c in found if c.rank not in ranks))
    since = int(_median([c.since for c in own]))
    before = _median([c.before for c in own])
    after = _median([c.after for c in own])
    typical = min(own, key=lambda c: abs(c.ratio - after / before))
    part, words = _where(typical)
    timing = next((v.agent.timing for v in views if v.rank == typical.rank and v.agent), None)
    loader, site = _loader(timing) if part == "data" else ("", None)
    one = "step" if unit == "steps" else "collective"
    if every:
        who, verb = f"every rank's {one}", "takes"
    elif len(ranks) == 1:
        who, verb = f"rank {ranks[0]}'s {one}", "takes"
    else:
        who, verb = f"the {one}s of ranks {format_ranks(ranks)}", "take"
    others = f"; ranks {format_ranks(waiting)} wait for {'it' if len(ranks) == 1 else 'them'}"
    if typical.gradual:
        grows = "grows" if verb == "takes" else "grow"
        head = f"since {one} ~{since} {who} {grows} longer gradually: now {after / before:.1f}x"
    else:
        head = f"from {one} ~{since} {who} {verb} {after / before:.1f}x longer"
    held = busier(found, before, after, peers)
    left = held.left if held is not None else after / before
    if held is not None and held.node:
        share = min(1.0, held.grown / (after - before))
        tail = (
            f": the node got busier, not the job: the kernel held the ranks off their CPUs "
            f"{_ms(held.grown)} more a step ({_ms(held.before)} -> {_ms(held.after)}), "
            f"{share * 100:.0f}% of the growth; less that, the step is {left:.1f}x what it was"
        )
    else:
        tail = ": a lasting change over the run"
    summary = f"{head} ({_ms(before)} -> {_ms(after)}), {words}{loader}"
    summary += (others if waiting else "") + tail
    facts: tuple[tuple[str, str], ...] = (
        ("since", f"{one} ~{since}"),
        ("before", _ms(before)),
        ("after", _ms(after)),
        ("ratio", f"{after / before:.2f}x"),
        ("grew in", part),
        ("shape", "gradual" if typical.gradual else "a step"),
        ("lasted", f"{typical.units} {unit}, {typical.seconds:.0f} s"),
    )
    if held is not None:
        facts += (
            ("run-queue delay", f"{_ms(held.before)} -> {_ms(held.after)}"),
            ("less run-queue delay", f"{left:.2f}x"),
            ("cause", CAUSE_NODE if held.node else CAUSE_JOB),
        )
    return Finding(
        KIND_SLOWDOWN,
        ranks,
        summary,
        location=site,
        recipe=RECIPE,
        severity=SEVERITY_WARNING if left >= WARN_RATIO else SEVERITY_INFO,
        waiting=waiting,
        facts=facts,
    )


def change_findings(views: Sequence[RankView]) -> list[Finding]:
    finding = change_finding(views)
    return [finding] if finding is not None else []
