"""A dump's ring held as columns: what 2,000 entries cost when most of them repeat.

Entries of one ring differ in a few numbers (sequence number, record id, creation time)
and repeat the rest (group, op, sizes, dtypes, the caller's line). An EntryTable keeps the
distinct repeated parts once (`rows`), an index into them per entry, and each numeric
column in its smallest exact form: one value for a column that never changes, a `range`
for a count, an `array` for other int64s. It reads as a sequence of FlightEntry, built on
access (in C, by zipping the columns), so about 10 bytes an entry stay held instead of
about 300, and `flight_compare` reads the columns themselves.
"""

from __future__ import annotations

import operator
from array import array
from collections.abc import Iterator, Sequence
from itertools import repeat
from typing import Any, overload

from .model import FlightEntry

# A row: the entry's repeated part, in FlightEntry's words.
ROW_FIELDS = (
    "group",
    "group_desc",
    "backend",
    "op",
    "input_sizes",
    "output_sizes",
    "input_dtypes",
    "output_dtypes",
    "location",
)
_GET = [operator.itemgetter(i) for i in range(len(ROW_FIELDS))]


class Same(Sequence):
    """A column whose every value is the same (held once)."""

    __slots__ = ("value", "size")

    def __init__(self, value: object, size: int) -> None:
        self.value, self.size = value, size

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator:
        return repeat(self.value, self.size)

    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> Same: ...
    def __getitem__(self, index: int | slice) -> Any:  # an int: the value; a slice: a Same as long
        if isinstance(index, slice):
            return Same(self.value, len(range(self.size)[index]))
        if not -self.size <= index < self.size:
            raise IndexError(index)
        return self.value


Column = Same | range | array | tuple  # each reads as a Sequence


def column(values: list) -> Column:
    """`values` in their smallest exact form (the values read back are equal to them)."""
    count = len(values)
    if not count or values.count(values[0]) == count:
        return Same(values[0] if count else None, count)
    if set(map(type, values)) == {int}:
        numbers = array("q", values)  # the caller checked the int64 range
        start = numbers[0]
        if numbers == array("q", range(start, start + count)):
            return range(start, start + count)
        return numbers
    return tuple(values)


class EntryTable(Sequence[FlightEntry]):
    """A ring's entries as columns; reads as a sequence of FlightEntry (no point-to-point
    entries: those are read one by one)."""

    __slots__ = (
        "rows",
        "kind",
        "pg_id",
        "seq",
        "state",
        "retired",
        "completed",
        "created_ns",
        "timeout_ms",
        "record_id",
    )

    rows: tuple[tuple, ...]
    kind: Column
    pg_id: Column
    seq: Column
    state: Column
    retired: Column
    completed: Column
    created_ns: Column
    timeout_ms: Column
    record_id: Column

    def __init__(self, rows: tuple[tuple, ...], kind: Column, **columns: Column) -> None:
        self.rows = rows  # distinct (group, desc, backend, op, sizes, dtypes, location)
        self.kind = kind  # per entry: its index in rows
        for name in self.__slots__[2:]:
            setattr(self, name, columns[name])

    def __len__(self) -> int:
        return len(self.kind)

    def _columns(self, positions: Sequence[int] | None = None) -> Iterator[FlightEntry]:
        def pick(col: Column) -> Iterator:
            return iter(col) if positions is None else map(col.__getitem__, positions)

        rows = self.rows
        n = len(self) if positions is None else len(positions)
        if len(rows) == 1:
            shapes: list = [repeat(v, n) for v in rows[0]]
        else:
            kinds = list(pick(self.kind))
            shapes = [map(get, map(rows.__getitem__, kinds)) for get in _GET]
        created = (c / 1e9 if c else None for c in pick(self.created_ns))
        fields = (
            shapes[0],
            shapes[1],
            pick(self.pg_id),
            pick(self.seq),
            repeat(False, n),
            shapes[3],
            shapes[2],
            shapes[4],
            shapes[5],
            shapes[6],
            shapes[7],
            pick(self.state),
            pick(self.retired),
            pick(self.completed),
            created,
            pick(self.timeout_ms),
            shapes[8],
            pick(self.record_id),
            repeat(None, n),  # duration: a timed ring is never a table (flight_columns)
        )
        return map(tuple.__new__, repeat(FlightEntry), zip(*fields, strict=True))

    def __iter__(self) -> Iterator[FlightEntry]:
        return self._columns()

    def entries_at(self, positions: Sequence[int]) -> list[FlightEntry]:
        return list(self._columns(positions))

    @overload
    def __getitem__(self, index: int) -> FlightEntry: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[FlightEntry, ...]: ...
    def __getitem__(self, index: int | slice) -> FlightEntry | tuple[FlightEntry, ...]:
        if isinstance(index, slice):
            return tuple(self.entries_at(range(len(self))[index]))
        if not -len(self) <= index < len(self):
            raise IndexError(index)
        return self.entries_at((index % len(self),))[0]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (EntryTable, tuple, list)):
            return len(self) == len(other) and all(map(operator.eq, self, other))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"EntryTable({len(self)} entries, {len(self.rows)} distinct)"

    def first_of_groups(self) -> dict[str, tuple[int | None, str]]:
        """group -> (its pg_id, its desc) by its first entry, in the order groups appear."""
        firsts: dict[int, int] = {}
        if len(self.rows) == 1:
            firsts[0] = 0
        else:
            for position, kind in enumerate(self.kind):
                firsts.setdefault(kind, position)
        out: dict[str, tuple[int | None, str]] = {}
        for kind, position in sorted(firsts.items(), key=operator.itemgetter(1)):
            group, desc = self.rows[kind][0], self.rows[kind][1]
            out.setdefault(group, (self.pg_id[position], desc))
        return out


def first_of_groups(entries: Sequence[FlightEntry]) -> dict[str, tuple[int | None, str]]:
    """group -> (pg_id, desc) of its first entry, for a table or a plain sequence."""
    if isinstance(entries, EntryTable):
        return entries.first_of_groups()
    out: dict[str, tuple[int | None, str]] = {}
    for entry in entries:
        out.setdefault(entry.group, (entry.pg_id, entry.group_desc))
    return out


def entry_times(entries: Sequence[FlightEntry]) -> Iterator[tuple[str, int, float]]:
    """(group, seq, created in seconds) of each collective entry with a creation time, from
    the columns where the entries are a table (no entry object is made)."""
    if not isinstance(entries, EntryTable):
        return ((e.group, e.seq, e.created) for e in entries if not e.p2p and e.created is not None)
    names = [row[0] for row in entries.rows]
    groups = (
        repeat(names[0], len(entries)) if len(names) == 1 else map(names.__getitem__, entries.kind)
    )
    return (
        (group, seq, created / 1e9)
        for group, seq, created in zip(groups, entries.seq, entries.created_ns, strict=True)
        if created
    )
