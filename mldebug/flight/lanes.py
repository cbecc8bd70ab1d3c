"""One rank's collectives on one group, from its Flight Recorder dump, in the ledger's form.

A `Lane` is what the comparison needs of a (rank, group): its calls by sequence number as
ledger records, its last number, the last it saw complete, and its entries on demand (for
the words of a finding). From a column table (flight_table.py) a lane is built from the
columns in C, and its call records are shared: one `ledger.Call` per distinct call (op,
sizes, dtypes, line, state), and one calls mapping per distinct lane, so 1,024 ranks whose
rings say the same thing hold one mapping, not 1,024 (`Book` keeps both for one
comparison). A dump of plain entries (the checked reader's) is read entry by entry.
"""

from __future__ import annotations

from array import array
from collections import defaultdict
from collections.abc import Mapping, Sequence
from itertools import compress

import mldebug.ledger.compare as ledger
import mldebug.ledger.rules as rules

from .model import FlightDump, FlightEntry
from .table import EntryTable, Same

MAX_SHARED = 1 << 16  # distinct calls kept by one comparison (a hostile set of dumps)


def call_of(entry: FlightEntry, rank: int) -> ledger.Call:
    """One entry in the ledger's form (a p2p entry's peer: the other end, group ranks)."""
    op = rules.op_name(entry.op)
    peer = None
    if entry.p2p or op in rules.P2P_OPS:
        peers = rules.p2p_peers(entry.op)
        if peers is not None:
            peer = peers[1] if peers[0] == rank else peers[0]
    return ledger.Call(
        entry.seq,
        op,
        entry.input_sizes,
        tuple(rules.dtype_name(d) for d in entry.input_dtypes),
        entry.output_sizes,
        entry.location,
        entry.state or None,
        entry.created,
        entry.created if entry.completed else None,
        peer,
    )


class Book:
    """For one comparison: the shared ledger record of each distinct call (records carry
    no number and no times, seq 0: the ledger keys calls by their number), and the calls
    mapping of each distinct lane."""

    def __init__(self) -> None:
        self.calls: list[ledger.Call] = []
        self._numbers: dict[tuple, int] = {}
        self._lanes: dict[tuple, dict[int, ledger.Call]] = {}

    def number(self, entry: FlightEntry) -> int:
        key = (
            entry.op,
            entry.input_sizes,
            entry.input_dtypes,
            entry.output_sizes,
            entry.location,
            entry.state,
        )
        number = self._numbers.get(key)
        if number is None:
            number = len(self.calls)
            self.calls.append(call_of(entry, -1)._replace(seq=0, entered=None, ended=None))
            if len(self._numbers) < MAX_SHARED:
                self._numbers[key] = number
        return number

    def lane_calls(
        self, key: tuple, seqs: Sequence[int], numbers: Sequence[int]
    ) -> dict[int, ledger.Call]:
        calls = self._lanes.get(key)
        if calls is None:
            calls = dict(zip(seqs, map(self.calls.__getitem__, numbers), strict=True))
            self._lanes[key] = calls
        return calls


class Lane:
    """One rank's collectives on one group: calls by number, its last, its last done."""

    __slots__ = ("entries", "positions", "seqs", "calls", "last", "done", "desc", "backend")

    def __init__(
        self,
        entries: Sequence[FlightEntry],
        positions: Sequence[int],
        seqs: Sequence[int],
        calls: Mapping[int, ledger.Call],
        done: int | None,
        first: FlightEntry | None,
    ) -> None:
        self.entries, self.positions, self.seqs, self.calls = entries, positions, seqs, calls
        self.last = (seqs[-1] if isinstance(seqs, range) else max(seqs)) if len(seqs) else 0
        self.done = done
        self.desc = first.group_desc if first is not None else ""
        self.backend = first.backend if first is not None else ""

    def __contains__(self, seq: object) -> bool:
        return seq in self.calls

    def get(self, seq: int) -> FlightEntry | None:
        """Its entry of collective `seq` (the last one, where a ring holds it twice)."""
        if seq not in self.calls:
            return None
        seqs = self.seqs
        if isinstance(seqs, range):
            index = seqs.index(seq)
        else:
            index = len(seqs) - 1 - seqs[::-1].index(seq)
        position = self.positions[index]
        if isinstance(self.entries, EntryTable):
            return self.entries.entries_at((position,))[0]
        return self.entries[position]


EMPTY: Mapping[int, ledger.Call] = {}


def _picked(col: Sequence, positions: Sequence[int] | None) -> Sequence:
    if positions is None or isinstance(col, Same):
        return col if positions is None else Same(col[0] if len(col) else None, len(positions))
    return list(map(col.__getitem__, positions))


def _signature(seqs: Sequence[int]) -> object:
    if isinstance(seqs, range):
        return seqs
    return array("q", seqs).tobytes()


def _table_lanes(table: EntryTable, book: Book) -> dict[str, Lane]:
    names = [row[0] for row in table.rows]
    split: dict[str, list[int] | None]
    if len(set(names)) == 1:
        split = {names[0]: None}  # one group: every entry
    else:
        split = defaultdict(list)
        for position, kind in enumerate(table.kind):
            split[names[kind]].append(position)  # type: ignore[union-attr]
    lanes = {}
    for group, chosen in split.items():
        positions: Sequence[int] = range(len(table)) if chosen is None else chosen
        seqs = table.seq if chosen is None else _picked(table.seq, chosen)
        seqs = list(seqs) if isinstance(seqs, Same) else seqs  # one number, written twice
        kinds, states = _picked(table.kind, chosen), _picked(table.state, chosen)
        if isinstance(kinds, Same) and isinstance(states, Same):  # one call, repeated
            number = book.number(table.entries_at((positions[0],))[0]) if len(positions) else 0
            numbers: Sequence[int] = Same(number, len(positions))
            key: tuple = (group, _signature(seqs), number)
        else:
            pairs = list(zip(kinds, states, strict=True))
            where = dict(zip(pairs, positions, strict=True))  # each (row, state) once
            local = {pair: book.number(table.entries_at((p,))[0]) for pair, p in where.items()}
            numbers = list(map(local.__getitem__, pairs))
            key = (group, _signature(seqs), array("q", numbers).tobytes())
        calls = book.lane_calls(key, seqs, numbers)
        completed = _picked(table.completed, chosen)
        if isinstance(completed, Same):
            done = (max(seqs) if len(seqs) else None) if completed.value else None
        else:
            done = max(compress(seqs, completed), default=None)
        first = table.entries_at((positions[0],))[0] if len(positions) else None
        lanes[group] = Lane(table, positions, seqs, calls, done, first)
    return lanes


def lanes_of(dump: FlightDump, book: Book) -> tuple[dict[str, Lane], dict[str, list[FlightEntry]]]:
    """Per group, the dump's collectives as a lane, and its point-to-point entries."""
    if isinstance(dump.entries, EntryTable):
        return _table_lanes(dump.entries, book), {}
    collective: dict[str, dict[int, int]] = defaultdict(dict)
    p2p: dict[str, list[FlightEntry]] = defaultdict(list)
    entries = dump.entries
    for position, entry in enumerate(entries):  # one pass: a dump may hold thousands of groups
        if entry.p2p:
            p2p[entry.group].append(entry)
        else:
            collective[entry.group][entry.seq] = position  # the last one of a number wins
    lanes = {}
    for group, by_seq in collective.items():
        seqs, positions = list(by_seq), list(by_seq.values())
        calls = {seq: book.calls[book.number(entries[p])] for seq, p in by_seq.items()}
        done = max((s for s, p in by_seq.items() if entries[p].completed), default=None)
        lanes[group] = Lane(entries, positions, seqs, calls, done, entries[positions[0]])
    return lanes, dict(p2p)


def empty_lane() -> Lane:
    return Lane((), (), (), EMPTY, None, None)
