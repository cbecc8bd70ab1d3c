"""ranks/<rank>/events.jsonl: what the agent noticed, one JSON object a line (docs/agent.md).

Any part of the agent reports through `emit(kind, message, **fields)`; a part that fails
reports through `fail(part, error)` (one `agent_error` event and one stderr line, then the
part stops) or `warn_once(part, message)` (the same, for a part that goes on). Nothing here
raises. A file that cannot be written (a full disk) loses the line without a word on the
program's stderr: the disk is not the agent's failure, and `mldebug run` says it is full;
the next event tries again.

Stdlib only. Until `configure()` is called (outside a rank, in a forked child) every call
is a no-op, so other parts may call it unconditionally.
"""

from __future__ import annotations

import json
import math
import os
import sys
import threading
import time

MAX_LINES = 1000  # per rank, the last one saying that later events are left out
MAX_MESSAGE = 2000
MAX_LINE = 64 << 10
KIND_ERROR = "agent_error"
KIND_TRUNCATED = "truncated"
ENV_FAULT = "MLDEBUG_AGENT_FAULT"  # tests: parts named here fail on purpose (docs/agent.md)

TYPE_CHECKING = False  # typing is not imported in ranks; mypy reads this block
if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path


class _Writer:
    def __init__(
        self,
        path: Path,
        rank: int,
        open_append: Callable[[Path], int],
        step_of: Callable[[], int | None],
    ) -> None:
        self.path = path
        self.rank = rank
        self.pid = os.getpid()
        self._open_append = open_append
        self._step_of = step_of
        self._fd: int | None = None
        self._lines = 0  # lines in the file: counted when it is first opened
        self._lock = threading.Lock()

    def _count_existing(self) -> int:
        """Lines already in the file (a restarted rank appends to its predecessor's)."""
        count = 0
        try:
            with open(self.path, "rb") as handle:
                while chunk := handle.read(1 << 16):
                    count += chunk.count(b"\n")
        except OSError:
            pass
        return count

    def write(self, record: dict) -> bool:
        if os.getpid() != self.pid:
            return False
        with self._lock:
            try:
                if self._fd is None:
                    self._lines = self._count_existing()
                    self._fd = self._open_append(self.path)
                if self._lines >= MAX_LINES:
                    return False
                if self._lines == MAX_LINES - 1:
                    record = self._record(
                        KIND_TRUNCATED,
                        f"events.jsonl holds {MAX_LINES:,} lines: later events are left out",
                    )
                try:
                    line = json.dumps(record, default=str, allow_nan=False)
                except ValueError:  # inf or NaN in a field: written as a string
                    line = json.dumps(_finite(record), default=str, allow_nan=False)
                if len(line) > MAX_LINE:
                    line = json.dumps(
                        {k: record[k] for k in ("time", "rank", "kind", "step", "message")}
                    )
                os.write(self._fd, line.encode("utf-8", "replace") + b"\n")
                self._lines += 1
                return True
            except (OSError, ValueError, TypeError):
                return False  # this line is lost; the next one tries again

    def _record(self, kind: str, message: str, **fields: object) -> dict:
        try:
            step = self._step_of()
        except Exception:
            step = None
        record = {
            "time": time.time(),
            "rank": self.rank,
            "kind": kind,
            "step": step,
            "message": str(message)[:MAX_MESSAGE],
        }
        for key, value in fields.items():
            record.setdefault(key, value)
        return record


def _finite(value: object) -> object:
    """`value` with every non-finite float replaced by its name ("inf", "-inf", "nan")."""
    if isinstance(value, float) and (value != value or value in (math.inf, -math.inf)):
        return str(value)
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


_writer: _Writer | None = None
_failed: set[str] = set()
_faults = frozenset(part for part in os.environ.get(ENV_FAULT, "").split(",") if part)


def configure(
    path: Path,
    rank: int,
    open_append: Callable[[Path], int],
    step_of: Callable[[], int | None] = lambda: None,
) -> None:
    """Start writing `path` (ranks/<rank>/events.jsonl); `step_of()` gives the current step."""
    global _writer
    _writer = _Writer(path, rank, open_append, step_of)


def emit(kind: str, message: str, **fields: object) -> bool:
    """Append one event; True when it was written. Extra fields go into the line as they
    are (JSON-serialisable values; others are written as their str())."""
    writer = _writer
    if writer is None:
        return False
    try:
        return writer.write(writer._record(kind, message, **fields))
    except Exception:
        return False


def say(text: str) -> None:
    """One line on the rank's stderr, prefixed `mldebug agent:`; never raises."""
    try:
        sys.stderr.write(f"mldebug agent: {text}\n")
        sys.stderr.flush()
    except Exception:
        pass


def warn_once(part: str, message: str, quiet: bool = False) -> None:
    """A part that goes on after a failure says so once: an agent_error event, and a line
    on stderr unless `quiet` (a file the disk would not take is no news to the program)."""
    if part in _failed or (_writer is not None and os.getpid() != _writer.pid):
        return
    _failed.add(part)
    if not quiet:
        say(f"{part}: {message}")
    emit(KIND_ERROR, f"{part}: {message}", part=part)


def fail(part: str, error: BaseException) -> None:
    """A part of the agent failed and stops (the caller stops it): said once."""
    warn_once(part, f"{type(error).__name__}: {error}; this part stops, the program runs on")


class InjectedFault(RuntimeError):
    """Raised where MLDEBUG_AGENT_FAULT names a part: tests prove a failing part does no harm."""


def fault_point(part: str) -> None:
    """Raise InjectedFault when the environment asks this part to fail (tests only)."""
    if _faults and part in _faults:
        raise InjectedFault(f"fault injected by {ENV_FAULT}")
