"""Read what ranks' agents noticed: ranks/<rank>/events.jsonl (docs/agent.md), bounded.

One parser for every reader (`dump` and the live view's verdict through mldebug.observe.pyspy,
the Anomalies tab through mldebug.live.runfiles). An event file is data from the rank: read
through rundir (no symlink, regular file, capped from its end), each line a JSON object or
skipped and counted; text made safe to show; a run directory others may write is not read.
Each reader keeps a cache by (size, mtime), so a live view re-reads only the files that
grew, and reads at most MAX_BYTES a poll across all ranks.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from mldebug.collect.changed import ChangedFiles
from mldebug.files import safeio
from mldebug.files.rundir import RunPaths
from mldebug.model import RankEvent
from mldebug.textsafe import printable

EVENTS_BYTES = 64 * 1024  # the end of one events.jsonl
MAX_BYTES = 8 << 20  # all ranks' files at one read: a large job gets less of each
MIN_BYTES = 4096
MAX_EVENTS = 500  # across ranks, newest kept
MAX_RANK_DIRS = 4096
MAX_FIELDS = 16
MAX_FIELD_TEXT = 400
MAX_STEP = 1 << 62
LATEST_TIME = 1e11  # year 5138: later "times" in an event are garbage
_BASE = frozenset({"time", "rank", "kind", "type", "message", "summary", "location", "step"})


def parse_time(value: object) -> float | None:
    """Seconds since the epoch from a JSON value; None for what is not a time a clock can
    show (a string, true, NaN, 1e400, an integer too large for a float)."""
    when = safeio.json_number(value)
    return when if when is not None and 0.0 <= when < LATEST_TIME else None


def _step(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 0 <= value <= MAX_STEP else None


def _number(value: float) -> str:
    return f"{value:.4g}" if math.isfinite(value) else str(value)


def _field_text(value: object) -> str | None:
    """A field's value as text to show; None for what is not a plain value or a list."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return str(value) if abs(value) < 1 << 63 else None
    if isinstance(value, float):
        return _number(value)
    if isinstance(value, str):
        text = value
    elif isinstance(value, list):
        # A trail: [[name, abs-max], ...] reads as "name 1.2e+20, ..."
        pairs = [
            (item[0], item[1])
            for item in value[:64]
            if isinstance(item, list)
            and len(item) == 2
            and isinstance(item[0], str)
            and isinstance(item[1], (int, float))
            and not isinstance(item[1], bool)
        ]
        if pairs and len(pairs) == len(value[:64]):
            text = ", ".join(f"{name} {_number(float(amax))}" for name, amax in pairs)
        else:
            text = json.dumps(value, default=str)
    else:
        return None
    return printable(text[:MAX_FIELD_TEXT])


def parse_event_line(rank: int, line: str) -> RankEvent | None:
    """One agent event; None for a line that is not a JSON object."""
    try:
        data = json.loads(line)
    except (ValueError, RecursionError):  # RecursionError: "[[[[..." nested deeper than C's stack
        return None
    if not isinstance(data, dict):
        return None
    location = data.get("location")
    if location is None and data.get("file"):
        location = f"{data['file']}:{data.get('line', '?')}"
    fields = []
    for key, value in data.items():
        if key in _BASE or key in ("file", "line") or not isinstance(key, str):
            continue
        text = _field_text(value)
        if text is not None:
            fields.append((printable(key[:64]), text))
        if len(fields) == MAX_FIELDS:
            break
    return RankEvent(
        rank=data["rank"] if isinstance(data.get("rank"), int) else rank,
        time=parse_time(data.get("time")),
        kind=printable(str(data.get("kind") or data.get("type") or "event")),
        message=printable(str(data.get("message") or data.get("summary") or "")),
        location=printable(str(location)) if location else None,
        step=_step(data.get("step")),
        fields=tuple(fields),
    )


def _lines(path: Path, max_bytes: int) -> list[str]:
    try:
        data, start = safeio.read_tail(path, max_bytes)
    except OSError:
        return []
    lines = data.decode("utf-8", errors="replace").split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    if start > 0 and lines:
        lines = lines[1:]  # the first line was cut in the middle
    return lines


def _reader_of(rank: int, each: int) -> Callable[[Path], tuple[list[RankEvent], int]]:
    """How one rank's events file is read (its last `each` bytes)."""
    return lambda path: read_event_file(rank, path, each)


def read_event_file(
    rank: int, path: Path, max_bytes: int = EVENTS_BYTES
) -> tuple[list[RankEvent], int]:
    """The events at the end of one rank's file, and how many lines were not events."""
    events, bad = [], 0
    for line in _lines(path, max_bytes)[-MAX_EVENTS:]:
        if not line.strip():
            continue
        event = parse_event_line(rank, line)
        if event is None:
            bad += 1
        else:
            events.append(event)
    return events, bad


@dataclass
class EventsReader:
    """The events of a run directory's ranks, re-reading only the files that changed."""

    _files: ChangedFiles = field(default_factory=ChangedFiles)

    def read(self, root: str | os.PathLike | None) -> tuple[tuple[RankEvent, ...], int]:
        """(events oldest first, the newest MAX_EVENTS; lines that were not events)."""
        if root is None or not safeio.is_private_dir(root):
            return (), 0
        paths = RunPaths(Path(root))
        ranks = paths.rank_ids()[:MAX_RANK_DIRS]
        each = max(MIN_BYTES, min(EVENTS_BYTES, MAX_BYTES // max(1, len(ranks))))
        events: list[RankEvent] = []
        bad = 0
        for rank in ranks:
            found = self._files.get(paths.events_file(rank), _reader_of(rank, each))
            if found is not None:
                events.extend(found[0])
                bad += found[1]
        events.sort(key=lambda event: (event.time or 0.0, event.rank))
        return tuple(events[-MAX_EVENTS:]), bad
