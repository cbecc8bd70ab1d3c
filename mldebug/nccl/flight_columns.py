"""The fast way through a Flight Recorder ring: a column at a time, in C where it can be.

A ring holds thousands of entries that differ in a few numbers (sequence number, times,
state) and repeat the rest (group, op, sizes, dtypes, the caller's stack). Per key, one
`map(dict.get, ...)` pulls the column out in C; the repeated part is keyed by its `repr`
(plain data only comes out of the unpickler, and equal reprs of plain data are equal
values) and normalised once per distinct value by the slow, checked path; the entries are
then built by `tuple.__new__` over zipped columns. Anything unusual in a column (a type
torch never writes, a number out of range) returns None: the caller reads entry by entry.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from itertools import chain, repeat

from .flight_model import FlightEntry

_LIMIT = 1 << 63
_INT_OR_NONE = {int, type(None)}
_BOOL_OR_NONE = {bool, type(None)}
_STATES = frozenset(("scheduled", "started", "completed"))
_TUPLE_KEYS = ("process_group", "input_dtypes", "output_dtypes")


def _column(items: list, key: str) -> list:
    return list(map(dict.get, items, repeat(key)))


def _ints(values: list) -> bool:
    """Plain ints (or None) within torch's int64: usable as they are."""
    if not set(map(type, values)) <= _INT_OR_NONE:
        return False
    numbers = [v for v in values if v is not None] if None in values else values
    return not numbers or (-_LIMIT < min(numbers) and max(numbers) < _LIMIT)


def fast_entries(
    items: list,
    shape_of: Callable[[dict], tuple | None],
    location_of: Callable[[object], str | None],
    done_of: Callable[[int | None], int | None],
) -> list[FlightEntry] | None:
    """The ring's entries, or None where it is not plain enough for the fast way.
    shape_of(raw) -> (group, desc, backend, op, sizes in/out, dtypes in/out, _) or None;
    location_of(frames); done_of(pg_id) -> the group's last completed collective."""
    if not items or set(map(type, items)) != {dict}:
        return None
    p2p = _column(items, "is_p2p")
    seqs = _column(items, "collective_seq_id")
    pg_ids = _column(items, "pg_id")
    created = _column(items, "time_created_ns")
    timeouts = _column(items, "timeout_ms")
    record_ids = _column(items, "record_id")
    states = _column(items, "state")
    retired = list(map(operator.is_, _column(items, "retired"), repeat(True)))
    if (
        not set(map(type, p2p)) <= _BOOL_OR_NONE
        or True in set(p2p)  # point-to-point ops: numbered by p2p_seq_id, the slow way
        or set(map(type, seqs)) != {int}
        or not all(map(_ints, (seqs, pg_ids, created, timeouts, record_ids)))
        or any(map(operator.contains, items, repeat("duration_ms")))  # timed: the slow way
        or not set(map(type, states)) <= {str}
        or not set(states) <= _STATES
    ):
        return None
    # The repeated part, keyed per entry by its group and dtypes (as tuples), the reprs of
    # its sizes and the identity of its op name (the objects live as long as `items`: ids
    # are not reused meanwhile), normalised once per distinct key by the checked path.
    names = _column(items, "profiling_name")
    groups, in_types, out_types = (_column(items, k) for k in _TUPLE_KEYS)
    # As tuples, these keys are exact only when they hold strings (True == 1 otherwise).
    if not set(map(type, groups)) | set(map(type, in_types)) | set(map(type, out_types)) <= {
        tuple,
        list,
    } or not set(map(type, chain(*groups, *in_types, *out_types))) <= {str}:
        return None
    keys = list(
        zip(
            map(tuple, groups),
            map(id, names),
            map(repr, _column(items, "input_sizes")),
            map(repr, _column(items, "output_sizes")),
            map(tuple, in_types),
            map(tuple, out_types),
            strict=True,
        )
    )
    try:
        first = dict(zip(keys, range(len(keys)), strict=True))
    except TypeError:  # something unhashable in a group name or a dtype: the slow way
        return None
    shapes = {key: shape_of(items[index]) for key, index in first.items()}
    if None in shapes.values():
        return None  # an entry without a group: the slow way counts it as dropped
    rows: list[tuple] = list(map(shapes.__getitem__, keys))  # type: ignore[arg-type]
    # torch shares each distinct frame between entries (its pickle memoises them): an
    # entry's stack is keyed by the identities of its frames.
    frames = _column(items, "frames")
    kinds = set(map(type, frames))
    if kinds == {type(None)}:
        places: list[str | None] = list(repeat(None, len(items)))
    elif kinds == {list}:
        stacks = list(map(tuple, map(map, repeat(id), frames)))
        known = {
            key: location_of(frames[index])
            for key, index in dict(zip(stacks, range(len(stacks)), strict=True)).items()
        }
        places = list(map(known.__getitem__, stacks))
    else:
        return None
    done = {pg: done_of(pg) for pg in set(pg_ids)}
    completed = [
        state == "completed" or gone or (last is not None and seq <= last)
        for state, gone, seq, last in zip(
            states, retired, seqs, map(done.__getitem__, pg_ids), strict=True
        )
    ]
    get = operator.itemgetter
    columns: tuple = (
        map(get(0), rows),
        map(get(1), rows),
        pg_ids,
        seqs,
        repeat(False, len(items)),
        map(get(3), rows),
        map(get(2), rows),
        map(get(4), rows),
        map(get(5), rows),
        map(get(6), rows),
        map(get(7), rows),
        states,
        retired,
        completed,
        (c / 1e9 if c else None for c in created),
        timeouts,
        places,
        record_ids,
        repeat(None, len(items)),  # duration: never in the fast way
    )
    return list(map(tuple.__new__, repeat(FlightEntry), zip(*columns, strict=True)))
