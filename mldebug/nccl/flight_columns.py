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
from collections.abc import Callable
from itertools import repeat

from .flight_table import EntryTable, Same, column

_LIMIT = 1 << 63
_INT_OR_NONE = {int, type(None)}
_BOOL_OR_NONE = {bool, type(None)}
_STATES = frozenset(("scheduled", "started", "completed"))
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


def _ints(values: tuple) -> bool:
    """Plain ints (or None) within torch's int64: usable as they are."""
    if not set(map(type, values)) <= _INT_OR_NONE:
        return False
    numbers = [v for v in values if v is not None] if None in values else values
    return not numbers or (-_LIMIT < min(numbers) and max(numbers) < _LIMIT)


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
        shape_keys = list(map(repr, map(shape[0], items)))
    except (KeyError, RecursionError, ValueError):  # an entry without a field: the slow way
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
        or not all(map(_ints, (seqs, pg_ids, created, timeouts, record_ids)))
        or not set(map(type, states)) <= {str}
        or not set(states) <= _STATES
    ):
        return None
    kinds = set(map(type, frames))
    if kinds == {type(None)}:
        stacks: list | tuple = none
    elif kinds == {list}:
        stacks = list(map(tuple, map(map, repeat(id), frames)))  # the frames live in items
    else:
        return None
    keys = list(zip(shape_keys, stacks, strict=True))
    last = dict(
        zip(keys, range(count), strict=True)
    )  # each distinct key, with an entry that has it
    number = {key: n for n, key in enumerate(last)}
    rows = tuple(shape_of(items[index]) for index in last.values())
    if None in rows:
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
        column(list(map(number.__getitem__, keys))) if len(rows) > 1 else Same(0, count),
        pg_id=column(list(pg_ids)),
        seq=column(list(seqs)),
        state=column(list(states)),
        retired=column(retired),
        completed=column(completed),
        created_ns=column(list(created)),
        timeout_ms=column(list(timeouts)),
        record_id=column(list(record_ids)),
    )
