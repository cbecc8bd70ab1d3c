"""The excepthook that leaves ranks/<rank>/error.json behind an uncaught exception."""

from __future__ import annotations

import os
import sys
import time

MAX_TRACEBACK = 20_000


def describe_exception(exc_type, exc, tb, is_library) -> dict:
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


def install_excepthook(path, rank: int, host: str, write_json, is_library) -> None:
    previous = sys.excepthook
    pid = os.getpid()

    def mldebug_excepthook(exc_type, exc, tb):
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
