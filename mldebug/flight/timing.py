"""Who enters each collective last, from Flight Recorder dumps with times (`mldebug nccl`).

Each entry carries `time_created_ns` (when its rank enqueued the collective) and, where the
recorder timed it (NCCL with TORCH_NCCL_ENABLE_TIMING), `duration_ms`. The dumps become the
collective ledger's RankProgress per group (calls by number, entry and end times) and the
ledger says who came last at each #N that every ranked dump recorded
(mldebug/ledger/arrival.py):

  * with `duration_ms` on every rank: each rank's wait is its own duration, so no clock
    agreement is needed; the rank that waited least came last, and the spread is how much
    longer the rank that waited most waited;
  * with creation times alone (gloo records no end): the rank that entered last, and the
    spread is latest minus earliest creation. Those are each host's clock: across nodes a
    clock offset shifts every spread alike (NTP keeps it to milliseconds).

A rank that comes last at most of them is named, with the median and the largest spread.
"""

from __future__ import annotations

from collections import Counter, defaultdict

import mldebug.ledger.compare as ledger
from mldebug.model import SEVERITY_WARNING, Finding
from mldebug.ranges import format_ranks

from .arrivals import entry_order_columns
from .model import FlightDump

KIND_STRAGGLER = "straggler"  # the same kind as the agent's finding (analysis/timing.py)
MIN_COLLECTIVES = 8
LAST_SHARE = 0.6
CHANCE = 1e-4  # ...and as often by chance (every rank as likely last) this rarely
MIN_SPREAD = 0.001  # seconds: the median spread, at least


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 10 else f"{seconds:.1f} s"


def progress_of(dumps: list[FlightDump]) -> dict[str, dict[int, ledger.RankProgress]]:
    """group -> rank -> its collectives with times, as the ledger takes them."""
    calls: dict[str, dict[int, dict[int, ledger.Call]]] = defaultdict(lambda: defaultdict(dict))
    for dump in dumps:
        if dump.rank is None:
            continue
        for entry in dump.entries:
            if entry.p2p or entry.created is None:
                continue
            ended = entry.created + entry.duration if entry.duration is not None else None
            calls[entry.group][dump.rank][entry.seq] = ledger.Call(
                entry.seq, entry.op, entered=entry.created, ended=ended
            )
    return {
        group: {r: ledger.RankProgress(r, max(c), calls=c) for r, c in by_rank.items()}
        for group, by_rank in calls.items()
    }


def entry_order(dumps: list[FlightDump]) -> dict[str, list[tuple[int, int, float]]]:
    """Per group: (seq, the rank that came last, the spread in seconds) for each collective
    every ranked dump recorded with a time, in seq order."""
    # Rings read as column tables (untimed, one group: flight_arrivals) are ordered rank by
    # rank from their columns, the same answer as the ledger's without building every call.
    fast = entry_order_columns(dumps)
    if fast is not None:
        return fast
    order: dict[str, list[tuple[int, int, float]]] = {}
    for group, members in progress_of(dumps).items():
        if len(members) < 2:
            continue
        found = ledger.arrivals(group, members)
        order[group] = [(a.seq, a.last, a.spread) for a in found if a.ranks == len(members)]
    return order


def arrival_findings(dumps: list[FlightDump]) -> list[Finding]:
    """Per group, the rank that entered most collectives last, when one clearly does."""
    findings = []
    for group, rows in entry_order(dumps).items():
        if len(rows) < MIN_COLLECTIVES:
            continue
        members = len({d.rank for d in dumps if d.rank is not None})
        counts = Counter(last for _, last, _ in rows)
        rank, last = counts.most_common(1)[0]
        spreads = sorted(spread for _, _, spread in rows)
        median = spreads[len(spreads) // 2]
        share = last / len(rows)
        if share < LAST_SHARE or median < MIN_SPREAD:
            continue
        if ledger.binomial_tail(last, len(rows), 1 / members) * members >= CHANCE:
            continue
        widest = max(rows, key=lambda row: row[2])
        others = sorted(r for r, _ in counts.items() if r != rank)
        label = "the default group" if group in ("0", "default_pg") else f"group {group}"
        findings.append(
            Finding(
                KIND_STRAGGLER,
                (rank,),
                f"Flight Recorder: in {label}, rank {rank} was the last to enter "
                f"{share * 100:.0f}% of the {len(rows)} collectives every rank recorded "
                f"(#{rows[0][0]}-#{rows[-1][0]}); "
                f"the first rank in waited a median {_ms(median)} for it, at most "
                f"{_ms(widest[2])} (#{widest[0]})",
                recipe="stragglers",
                severity=SEVERITY_WARNING,
                detail=(
                    f"also last now and then: ranks {format_ranks(others)}"
                    if others
                    else "no other rank entered any of them last"
                ),
            )
        )
    return findings
