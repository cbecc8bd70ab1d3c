"""What one dump's summary needs of its entries, counted once while the dump is read.

`mldebug nccl` prints, per rank and per process group, the group's last collective and how
many never completed. Counting that from the entries again after reading walked every
entry of every dump a second time (at 1,024 ranks x 2,000 entries, as long as half the
read). The reader (flight_read, in its worker process where there are workers) counts it
once into a FlightTally: a few values per group, whatever the ring's length.

    tally_entries(entries) -> FlightTally
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import repeat

from .model import FlightEntry, FlightTally
from .table import EntryTable


def _keep(best: dict, counts: dict, key, seq: int, done: bool, row: tuple) -> None:
    # The first entry of the highest seq wins, as max() picks among equals.
    if not done:
        counts[key] = counts.get(key, 0) + 1
    else:
        counts.setdefault(key, 0)
    held = best.get(key)
    if held is None or seq > held[0]:
        best[key] = (seq, done, row)


def _from_table(table: EntryTable) -> tuple[dict, dict, set[str]]:
    best: dict = {}  # group -> (seq, completed, (op, location))
    pending: dict = {}
    rows = table.rows
    names = [(row[0], (row[3], row[8])) for row in rows]
    n = len(table)
    kinds: Iterable[int] = repeat(0, n) if len(rows) == 1 else table.kind
    if len(rows) == 1 and isinstance(table.seq, range) and table.seq.step > 0 and n:
        # one kind, counting up: the last entry is the group's last; only `completed` is walked
        group, row = names[0]
        done = table.completed
        best[group] = (table.seq[-1], done[-1], row)
        pending[group] = n - sum(1 for flag in done if flag)
    else:
        for kind, seq, done in zip(kinds, table.seq, table.completed, strict=True):
            group, row = names[kind]
            _keep(best, pending, group, seq, done, row)
    return best, pending, {row[2] for row in rows if row[2]}


def _from_entries(entries: Iterable[FlightEntry]) -> tuple[dict, dict, set[str]]:
    best: dict = {}
    pending: dict = {}
    backends: set[str] = set()
    for entry in entries:
        if entry.backend:
            backends.add(entry.backend)
        if not entry.p2p:
            _keep(
                best, pending, entry.group, entry.seq, entry.completed, (entry.op, entry.location)
            )
    return best, pending, backends


def tally_entries(entries: Sequence[FlightEntry]) -> FlightTally:
    """Per group (collectives only) its last entry and how many did not complete, and the
    backends named; one pass, from the columns where the entries are a table."""
    if isinstance(entries, EntryTable):
        best, pending, backends = _from_table(entries)
    else:
        best, pending, backends = _from_entries(entries)
    groups = tuple(
        (group, op, seq, done, location, pending[group])
        for group, (seq, done, (op, location)) in best.items()
    )
    return FlightTally(count=len(entries), backends=tuple(sorted(backends)), groups=groups)
