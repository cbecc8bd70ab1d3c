"""The fast way through a Flight Recorder ring: a column at a time, in C where it can be.

A ring holds thousands of entries that differ in a few numbers (sequence number, times,
state) and repeat the rest (group, op, sizes, dtypes, the caller's stack). One
`itemgetter` per entry pulls every field the comparison needs, and `zip` turns them into
columns, both in C. The repeated part is keyed by its `repr` (plain data only comes out of
the unpickler, and equal reprs of plain data are equal values) and the stack by the
identities of its frames (torch's pickle shares each distinct frame between entries); each
distinct key is normalised once by the slow, checked path. What comes out is an EntryTable
(flight_table.py): the distinct rows and compact columns, not 2,000 objects. Anything
unusual (a type torch never writes, a number out of range, a key only some entries have)
returns None: the caller reads entry by entry.
"""

from __future__ import annotations

import operator
from array import array
from collections.abc import Callable, Iterable
from itertools import chain, compress, repeat

from .table import Column, EntryTable, Same, column

_LIMIT = 1 << 63
_INT_OR_NONE = {int, type(None)}
_BOOL_OR_NONE = {bool, type(None)}
_STATES = frozenset(("scheduled", "started", "completed"))
_LISTS = {list, tuple}
MAX_KINDS = 32  # distinct (shape, stack) found by comparing; past it, by key
_FIELDS = (
    "is_p2p",
    "collective_seq_id",
    "pg_id",
    "time_created_ns",
    "timeout_ms",
    "record_id",
    "state",
    "retired",
    "frames",
)
_SHAPE = (
    "process_group",
    "profiling_name",
    "input_sizes",
    "output_sizes",
    "input_dtypes",
    "output_dtypes",
)


def _numbers(values: tuple) -> Column | None:
    """Plain ints (or None) within torch's int64, in their smallest exact column; None
    for anything else (a type torch never writes, a number out of range)."""
    count = len(values)
    first = values[0]
    # True == 1 and False == 0 (torch writes no bool): for those two a count proves nothing
    if (
        type(first) is int
        and values.count(first) == count
        and (first not in (0, 1) or set(map(type, values)) == {int})
    ):
        return Same(first, count) if -_LIMIT < first < _LIMIT else None
    kinds = set(map(type, values))
    if kinds == {int}:
        try:
            numbers = array("q", values)
        except OverflowError:
            return None
        start = numbers[0]
        if numbers[-1] - start == count - 1 and numbers == array("q", range(start, start + count)):
            return range(start, start + count)
        return numbers
    if not kinds <= _INT_OR_NONE:
        return None
    known = [v for v in values if v is not None]
    if known and not (-_LIMIT < min(known) and max(known) < _LIMIT):
        return None
    return column(list(values))


def _getter(items: list, names: tuple[str, ...]) -> tuple[Callable, list[str]] | None:
    """An itemgetter of the names the first entry has (a dump's version decides which),
    once no other entry has one it lacks; None when the entries' keys differ otherwise."""
    first = items[0]
    present = [n for n in names if n in first]
    for name in names:
        if name not in first and any(map(operator.contains, items, repeat(name))):
            return None
    if len(present) < 2:
        return None  # not an entry torch writes (and itemgetter of one is not a tuple)
    return operator.itemgetter(*present), present


def _types(values: Iterable) -> set[type]:
    return set(map(type, values))


def _exact(names: list[str], shapes: list[tuple], frames: tuple) -> bool:
    """Is `==` exact here, so that equal parts read alike? Only where every leaf has the
    type torch writes (True == 1 and 1 == 1.0 otherwise, and they read apart)."""
    column = dict(zip(names, zip(*shapes, strict=True), strict=True))
    flat = chain.from_iterable
    for name in ("input_sizes", "output_sizes"):
        values = column.get(name, ())
        if not _types(values) <= _LISTS or not _types(flat(values)) <= _LISTS:
            return False
        if not _types(flat(flat(values))) <= {int}:
            return False
    for name in ("process_group", "input_dtypes", "output_dtypes"):
        values = column.get(name, ())
        if not _types(values) <= _LISTS or not _types(flat(values)) <= {str}:
            return False
    if not _types(column.get("profiling_name", ())) <= {str, type(None)}:
        return False
    # Stacks need no check: a stack's place is read alike from equal frames (flight/read.py).
    return _types(frames) <= {list, type(None)}


def _kinds(shapes: list[tuple], frames: tuple) -> tuple[list[int], list[int]] | None:
    """Per entry the number of its distinct (shape, stack), and an entry of each: by
    comparing each entry with the one before (a ring repeats itself in runs) and, where it
    changes, with the few distinct ones seen. None past MAX_KINDS (then keyed by repr)."""
    pairs = list(zip(shapes, frames, strict=True))
    count = len(pairs)
    changes = [0, *compress(range(1, count), map(operator.ne, pairs[1:], pairs[:-1]))]
    seen: list[tuple] = []
    firsts: list[int] = []
    kinds = [0] * count
    for start, end in zip(changes, [*changes[1:], count], strict=True):
        pair = pairs[start]
        for number, other in enumerate(seen):  # noqa: B007 (the break keeps it)
            if other == pair:
                break
        else:
            if len(seen) >= MAX_KINDS:
                return None
            number = len(seen)
            seen.append(pair)
            firsts.append(start)
        kinds[start:end] = repeat(number, end - start)
    return kinds, firsts


def _keyed(shapes: list[tuple], frames: tuple) -> tuple[list[int], list[int]] | None:
    """The same by key: the repr of the shape (of plain data, equal reprs are equal values)
    and the identities of the stack's frames (they live as long as the entries)."""
    kinds = _types(frames)
    if kinds == {type(None)}:
        stacks: list | tuple = frames
    elif kinds == {list}:
        stacks = list(map(tuple, map(map, repeat(id), frames)))
    else:
        return None
    keys = list(zip(map(repr, shapes), stacks, strict=True))
    last = dict(zip(keys, range(len(keys)), strict=True))  # each key, with an entry of it
    number = {key: n for n, key in enumerate(last)}
    return list(map(number.__getitem__, keys)), list(last.values())


def fast_entries(
    items: list,
    shape_of: Callable[[dict], tuple | None],
    location_of: Callable[[object], str | None],
    done_of: Callable[[int | None], int | None],
) -> EntryTable | None:
    """The ring's entries, or None where it is not plain enough for the fast way.
    shape_of(raw) -> (group, desc, backend, op, sizes in/out, dtypes in/out, location) or
    None; location_of(frames); done_of(pg_id) -> the group's last completed collective."""
    del location_of  # shape_of reads the stack itself; kept for the caller's signature
    if not items or set(map(type, items)) != {dict}:
        return None
    fields, shape = _getter(items, _FIELDS), _getter(items, _SHAPE)
    if fields is None or shape is None:
        return None
    try:
        got = dict(zip(fields[1], zip(*map(fields[0], items), strict=True), strict=True))
        shapes = list(map(shape[0], items))
    except KeyError:  # an entry without a field: the slow way
        return None
    count = len(items)
    none = (None,) * count
    p2p, seqs = got.get("is_p2p", none), got.get("collective_seq_id", none)
    pg_ids, created = got.get("pg_id", none), got.get("time_created_ns", none)
    timeouts, record_ids = got.get("timeout_ms", none), got.get("record_id", none)
    states, frames = got.get("state", none), got.get("frames", none)
    if (
        not set(map(type, p2p)) <= _BOOL_OR_NONE
        or True in p2p  # point-to-point ops: numbered by p2p_seq_id, the slow way
        or set(map(type, seqs)) != {int}
        or any(map(operator.contains, items, repeat("duration_ms")))  # timed: the slow way
        or not set(map(type, states)) <= {str}
        or not set(states) <= _STATES
    ):
        return None
    maybe = [_numbers(values) for values in (seqs, pg_ids, created, timeouts, record_ids)]
    numbers = [n for n in maybe if n is not None]
    if len(numbers) < len(maybe):
        return None
    try:
        kinds = _kinds(shapes, frames) if _exact(shape[1], shapes, frames) else None
        if kinds is None:
            kinds = _keyed(shapes, frames)
    except (RecursionError, ValueError):  # data nested too deep to compare or print
        return None
    if kinds is None:
        return None
    shaped = [shape_of(items[index]) for index in kinds[1]]
    rows = tuple(row for row in shaped if row is not None)
    if len(rows) < len(shaped):
        return None  # an entry without a group: the slow way counts it as dropped
    retired = list(map(operator.is_, got.get("retired", none), repeat(True)))
    groups = set(pg_ids)
    done = {pg: done_of(pg) for pg in groups}
    if retired.count(True) == count or states.count("completed") == count:
        completed: list = [True] * count
    elif len(groups) == 1 and not any(retired) and "completed" not in states:
        mark = done[pg_ids[0]]
        completed = [False] * count if mark is None else list(map(mark.__ge__, seqs))
    else:
        completed = [
            state == "completed" or gone or (last is not None and seq <= last)
            for state, gone, seq, last in zip(
                states, retired, seqs, map(done.__getitem__, pg_ids), strict=True
            )
        ]
    return EntryTable(
        rows,
        column(kinds[0]) if len(rows) > 1 else Same(0, count),
        pg_id=numbers[1],
        seq=numbers[0],
        state=column(list(states)),
        retired=column(retired),
        completed=column(completed),
        created_ns=numbers[2],
        timeout_ms=numbers[3],
        record_id=numbers[4],
    )
