"""Who enters each collective last, from Flight Recorder dumps with times (`mldebug nccl`).

Each entry carries `time_created_ns`: when its rank enqueued the collective. Per group, for
every collective #N that all the dumps recorded, the rank whose entry was created last is
the one the others waited for, and the spread (latest minus earliest creation) is how long
the first waited. A rank that enters last at most of them is named, with the median and the
largest spread. The times are each host's clock: across nodes a clock offset shifts every
spread alike (NTP keeps it to milliseconds), so a rank late by more than that still shows.
"""

from __future__ import annotations

import math
import operator
from collections import Counter, defaultdict

from mldebug.model import SEVERITY_WARNING, Finding
from mldebug.ranges import format_ranks

from .flight_arrivals import entry_order_columns
from .flight_model import FlightDump
from .flight_table import entry_times

KIND_STRAGGLER = "straggler"  # the same kind as the agent's finding (analysis/timing.py)
MIN_COLLECTIVES = 8
LAST_SHARE = 0.6
CHANCE = 1e-4  # ...and as often by chance (every rank as likely last) this rarely
MIN_SPREAD = 0.001  # seconds: the median spread, at least


def _chance(last: int, compared: int, ranks: int) -> float:
    """The binomial tail: one given rank last `last`+ times of `compared`, all alike."""
    p = 1 / ranks
    return sum(
        math.comb(compared, k) * p**k * (1 - p) ** (compared - k) for k in range(last, compared + 1)
    )


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 10 else f"{seconds:.1f} s"


def entry_order(dumps: list[FlightDump]) -> dict[str, list[tuple[int, int, float]]]:
    """Per group: (seq, the rank that entered it last, the spread in seconds) for each
    collective every ranked dump recorded with a time, in seq order."""
    fast = entry_order_columns(dumps)  # flight_arrivals: rank by rank from the columns
    if fast is not None:
        return fast
    created: dict[str, dict[int, dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    ranks: dict[str, set[int]] = defaultdict(set)
    for dump in dumps:
        if dump.rank is None:
            continue
        for group, seq, when in entry_times(dump.entries):  # from the columns (flight_table)
            created[group][seq][dump.rank] = when
            ranks[group].add(dump.rank)
    order: dict[str, list[tuple[int, int, float]]] = {}
    for group, by_seq in created.items():
        members = ranks[group]
        if len(members) < 2:
            continue
        rows = []
        for seq in sorted(by_seq):
            times = by_seq[seq]
            if set(times) != members:
                continue  # some rank's ring no longer holds it, or it never entered
            last = -max(zip(times.values(), map(operator.neg, times), strict=True))[
                1
            ]  # ties: lowest rank
            rows.append((seq, last, times[last] - min(times.values())))
        order[group] = rows
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
        if _chance(last, len(rows), members) * members >= CHANCE:
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
