"""state.json's memory sections, as read: `memory_timeline` and `memory_census` (written by
agent/memory_timeline.py and agent/census.py; docs/agent.md). Data from the rank: every
field checked, a wrong one absent, a section that is wrong no section at all. A state
without them (an older agent) has none."""

from __future__ import annotations

from mldebug.collect.eventfiles import parse_time
from mldebug.model import MemoryTimeline, TensorCensus, TensorGroup, TensorHolder

MAX_POINTS = 512
MAX_GROUPS = 64
MAX_TEXT = 64
MAX_HOLDERS = 2
MAX_WHOSE = 160  # "a local of train() at train.py:44"
BIG = 1 << 62


def _int(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 0 <= value < BIG else None


def _text(value: object) -> str | None:
    return value[:MAX_TEXT] if isinstance(value, str) else None


def parse_timeline(data: object) -> MemoryTimeline | None:
    if not isinstance(data, dict) or data.get("version") != 1:
        return None
    raw = data.get("points")
    points: list[tuple[float, int | None, int | None, int | None, int | None]] = []
    for row in raw[-MAX_POINTS:] if isinstance(raw, list) else ():
        if not isinstance(row, list) or len(row) != 5:
            continue
        when = parse_time(row[0])
        if when is None or (points and when <= points[-1][0]):
            continue
        points.append((when, _int(row[1]), _int(row[2]), _int(row[3]), _int(row[4])))
    found = data.get("limits")
    limits: dict = found if isinstance(found, dict) else {}
    return MemoryTimeline(
        points=tuple(points),
        host_total=_int(limits.get("host_total")),
        host_available=_int(limits.get("host_available")),
        cgroup_max=_int(limits.get("cgroup_max")),
        cgroup_current=_int(limits.get("cgroup_current")),
        gpu_total=_int(limits.get("gpu_total")),
    )


def _holder(raw: object) -> TensorHolder | None:
    if not isinstance(raw, dict):
        return None
    kind, whose = _text(raw.get("type")), raw.get("whose")
    if kind is None:
        return None
    return TensorHolder(
        kind,
        _int(raw.get("items")),
        _text(raw.get("name")),
        whose[:MAX_WHOSE] if isinstance(whose, str) else None,
    )


def _group(row: object) -> TensorGroup | None:
    if not isinstance(row, list) or len(row) not in (7, 8):
        return None
    shape, dtype, device = _text(row[0]), _text(row[1]), _text(row[2])
    count, nbytes = _int(row[5]), _int(row[6])
    if shape is None or dtype is None or device is None or count is None or nbytes is None:
        return None
    if not isinstance(row[3], bool):
        return None
    grad_fn = _text(row[4]) if row[4] is not None else None
    raw = row[7] if len(row) == 8 and isinstance(row[7], list) else []
    held = tuple(h for h in (_holder(r) for r in raw[:8]) if h is not None)[:MAX_HOLDERS]
    return TensorGroup(shape, dtype, device, row[3], grad_fn, count, nbytes, held)


def _census(data: object) -> TensorCensus | None:
    if not isinstance(data, dict):
        return None
    when = parse_time(data.get("time"))
    seconds = parse_time(data.get("seconds"))
    tensors = _int(data.get("tensors"))
    if when is None or seconds is None or tensors is None:
        return None
    raw = data.get("groups")
    groups = [_group(row) for row in raw[:MAX_GROUPS]] if isinstance(raw, list) else []
    return TensorCensus(
        when,
        seconds,
        data.get("partial") is True,
        tensors,
        tuple(g for g in groups if g is not None),
        data.get("requested") is True,
    )


def parse_census(data: object) -> tuple[TensorCensus | None, TensorCensus | None]:
    """(newest census, the one before it)."""
    if not isinstance(data, dict) or data.get("version") != 1:
        return None, None
    return _census(data.get("current")), _census(data.get("previous"))
