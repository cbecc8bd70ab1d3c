"""Read the `timing` section of a rank's state.json (mldebug/agent/timing.py) into the model.

Data from the rank: every row checked for its types and ranges; a bad row is left out, a bad
section is no timing at all. Nothing here raises.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import TypeVar

from mldebug.collect.eventfiles import parse_time
from mldebug.model.timing import (
    UNIT_CALLS,
    UNIT_STEPS,
    BlockTiming,
    CallTiming,
    FlightCallTiming,
    LoaderTiming,
    RankTiming,
    SiteTiming,
    StepBlock,
    StepTiming,
)

MAX_CALLS = 256
MAX_STEPS = 64
MAX_SITES = 16
MAX_HOLD_BLOCKS = 192  # blocks of 8 steps (the agent keeps 192)
MAX_TEXT = 512
MAX_BLOCKS = 160  # history rows (the agent keeps at most 128)
MAX_SECONDS = 7 * 86400.0  # a step or a wait longer than a week is garbage

T = TypeVar("T")  # a parsed row


def _int(value: object, low: int = 0) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if low <= value < 1 << 62 else None


def _text(value: object) -> str | None:
    return value[:MAX_TEXT] if isinstance(value, str) and value else None


def _seconds(value: object) -> float | None:
    when = parse_time(value)
    return when if when is not None and when <= MAX_SECONDS else None


def _call(row: object) -> CallTiming | None:
    if not isinstance(row, list) or len(row) != 6:
        return None
    group, seq, op = _text(row[0]), _int(row[1], 1), _text(row[2])
    entered, completed = parse_time(row[3]), parse_time(row[4])
    if group is None or seq is None or op is None or entered is None or completed is None:
        return None
    if completed < entered:
        return None
    return CallTiming(group, seq, op, entered, completed, row[5] is True)


def _flight(row: object) -> FlightCallTiming | None:
    if not isinstance(row, list) or len(row) != 6:
        return None
    group, seq, op, created = _text(row[0]), _int(row[1], 1), _text(row[2]), parse_time(row[3])
    step = _int(row[5]) if row[5] is not None else None
    duration = _seconds(row[4]) if row[4] is not None else None
    if group is None or seq is None or op is None or created is None:
        return None
    if (row[4] is not None and duration is None) or (row[5] is not None and step is None):
        return None
    return FlightCallTiming(group, seq, op, created, duration, step)


def _step(row: object) -> StepTiming | None:
    """[step, start, wall, collective, data, sync], and where the kernel counts it the
    run-queue delay inside the data wait (null where not known) and that of the whole step
    (agent/runqueue.py)."""
    if not isinstance(row, list) or len(row) not in (6, 7, 8):
        return None
    step, start = _int(row[0]), parse_time(row[1])
    wall, coll, data, sync = (_seconds(v) for v in row[2:6])
    if step is None or start is None or None in (wall, coll, data, sync):
        return None
    found = StepTiming(step, start, wall, coll, data, sync)  # type: ignore[arg-type]
    if len(row) >= 7 and (row[6] is not None or len(row) == 7):
        delay = _seconds(row[6])
        if delay is None or delay > found.data:
            return None
        found = replace(found, data_delay=delay)
    if len(row) == 8:
        whole = _seconds(row[7])
        if whole is None or whole > found.wall:
            return None
        found = replace(found, delay=whole)
    return found


def _block(row: object) -> StepBlock | None:
    """8 columns, or 9 with the steps' run-queue delay."""
    if not isinstance(row, list) or len(row) not in (8, 9):
        return None
    first, units = _int(row[0]), _int(row[3], 1)
    start, end = parse_time(row[1]), parse_time(row[2])
    wall, coll, data, sync = (_seconds(v) for v in row[4:8])
    if first is None or units is None or start is None or end is None or end < start:
        return None
    if wall is None or coll is None or data is None or sync is None:
        return None
    delay = _seconds(row[8]) if len(row) == 9 else None
    if len(row) == 9 and (delay is None or delay > wall):
        return None
    return StepBlock(first, start, end, units, wall, coll, data, sync, delay)


def _history(value: object) -> tuple[tuple[StepBlock, ...], str]:
    if not isinstance(value, dict) or value.get("unit") not in (UNIT_STEPS, UNIT_CALLS):
        return (), UNIT_STEPS
    blocks = _rows(value.get("rows"), _block, MAX_BLOCKS)
    ordered = all(
        a.first < b.first and a.end <= b.start + 1e-3
        for a, b in zip(blocks, blocks[1:], strict=False)
    )
    return (blocks if ordered else ()), str(value["unit"])


def _hold_block(row: object) -> BlockTiming | None:
    """10 columns, or 11 with the data wait less its run-queue delay."""
    if not isinstance(row, list) or len(row) not in (10, 11):
        return None
    block, first, start, steps = _int(row[0]), _int(row[1]), parse_time(row[2]), _int(row[3], 1)
    values = [_seconds(v) for v in row[4:]]
    if block is None or first is None or start is None or steps is None or None in values:
        return None
    return BlockTiming(block, first, start, steps, *values)  # type: ignore[arg-type]


def _loader(entry: object) -> LoaderTiming | None:
    if not isinstance(entry, dict):
        return None
    batches, wait = _int(entry.get("batches")), _seconds(entry.get("wait"))
    if batches is None or wait is None:
        return None
    workers = _int(entry.get("num_workers"))
    return LoaderTiming(
        _text(entry.get("dataset")), workers, _text(entry.get("site")), batches, wait
    )


def _site(row: object) -> SiteTiming | None:
    if not isinstance(row, list) or len(row) != 3:
        return None
    site, count, seconds = _text(row[0]), _int(row[1]), _seconds(row[2])
    if site is None or count is None or seconds is None:
        return None
    return SiteTiming(site, count, seconds)


def _rows(value: object, parse: Callable[[object], T | None], limit: int) -> tuple[T, ...]:
    if not isinstance(value, list):
        return ()
    parsed = (parse(row) for row in value[-limit:])
    return tuple(row for row in parsed if row is not None)


def parse_timing(value: object) -> RankTiming | None:
    """state.json's `timing`, checked; None when absent or not a timing section."""
    if not isinstance(value, dict) or value.get("version") != 1:
        return None
    history, unit = _history(value.get("history"))
    return RankTiming(
        history=history,
        history_unit=unit,
        calls=_rows(value.get("calls"), _call, MAX_CALLS),
        steps=_rows(value.get("steps"), _step, MAX_STEPS),
        loaders=_rows(value.get("loaders"), _loader, MAX_SITES),
        syncs=_rows(value.get("syncs"), _site, MAX_SITES),
        work=_rows(value.get("work"), _site, MAX_SITES),
        flight=_rows(value.get("flight"), _flight, MAX_CALLS),
        blocks=_rows(value.get("blocks"), _hold_block, MAX_HOLD_BLOCKS),
    )
