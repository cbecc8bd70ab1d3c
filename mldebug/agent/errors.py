"""The excepthook that leaves ranks/<rank>/error.json behind an uncaught exception."""

from __future__ import annotations

import os
import sys
import time

TYPE_CHECKING = False  # typing is not imported in ranks; mypy reads this block
if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path
    from types import TracebackType

MAX_TRACEBACK = 20_000


def describe_exception(
    exc_type: type[BaseException],
    exc: BaseException,
    tb: TracebackType | None,
    is_library: Callable[[str], object],
) -> dict:
    """The error file's content: type, message, raising frame, user frame, traceback.
    `is_library(path)`: the rule that tells library frames from the user's own."""
    import traceback

    frames = traceback.extract_tb(tb)
    location = f"{frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    user_location = ""
    for frame in reversed(frames):
        if not is_library(frame.filename):
            user_location = f"{frame.filename}:{frame.lineno}"
            break
    text = "".join(traceback.format_exception(exc_type, exc, tb))
    return {
        "type": exc_type.__qualname__ if isinstance(exc_type, type) else str(exc_type),
        "message": str(exc),
        "location": location,
        "function": frames[-1].name if frames else "",
        "user_location": user_location,
        "traceback": text[-MAX_TRACEBACK:],
    }


def install_excepthook(
    path: Path,
    rank: int,
    host: str,
    write_json: Callable[[Path, dict], object],
    is_library: Callable[[str], object],
) -> None:
    previous = sys.excepthook
    pid = os.getpid()

    def mldebug_excepthook(
        exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None
    ) -> None:
        # A process forked from the rank inherits this hook; its error is not the rank's.
        if os.getpid() == pid:
            try:
                record = {"rank": rank, "host": host, "pid": pid, "time": time.time()}
                record.update(describe_exception(exc_type, exc, tb, is_library))
                write_json(path, record)
            except Exception:
                pass  # never let the report of an error become another error
        previous(exc_type, exc, tb)

    sys.excepthook = mldebug_excepthook
