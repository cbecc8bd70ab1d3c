"""Source lines for the frames on screen, read off the UI thread and read again when a file
changes (a user editing the script while the job is being looked at).

The paths come from the ranks' stacks: a file is read only when it is a regular file
(a FIFO would block, a device would never end) of a sane size, and a path with a NUL or
that cannot be opened simply has no source line.
"""

from __future__ import annotations

import os
import stat
import threading
from collections import OrderedDict
from collections.abc import Iterable

MAX_SOURCE_BYTES = 4 << 20  # a larger "source file" is not worth reading for one line
MAX_FILES = 256  # files kept; the least recently used goes first

_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC


def _signature(path: str) -> tuple[int, int] | None:
    """(size, mtime) of a regular file small enough to read, else None."""
    try:
        info = os.stat(path)
    except (OSError, ValueError):  # ValueError: a NUL in the path
        return None
    if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_SOURCE_BYTES:
        return None
    return info.st_size, info.st_mtime_ns


def _read_lines(path: str) -> list[str] | None:
    try:
        fd = os.open(path, _FLAGS)
    except (OSError, ValueError):
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_SOURCE_BYTES:
            return None
        data = os.read(fd, MAX_SOURCE_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data.decode("utf-8", errors="replace").splitlines()


def readable_path(path: str) -> bool:
    return bool(path) and not path.startswith("<")


class SourceLines:
    """A cache of source files by path, safe to share between threads.

    `line()` never touches the disk (the UI thread calls it); `refresh()` does (a worker
    calls it) and says whether anything it was asked for changed.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._files: OrderedDict[str, tuple[tuple[int, int] | None, list[str]]] = OrderedDict()

    def line(self, path: str, number: int | None) -> str | None:
        """The line, "" when the file has none, None when the file was not read yet."""
        if number is None or not readable_path(path):
            return ""
        with self._lock:
            entry = self._files.get(path)
        if entry is None:
            return None
        lines = entry[1]
        return lines[number - 1].strip() if 0 < number <= len(lines) else ""

    def refresh(self, paths: Iterable[str]) -> bool:
        """Read the files among `paths` that are new or changed; True if any was."""
        changed = False
        for path in dict.fromkeys(p for p in paths if readable_path(p)):
            signature = _signature(path)
            with self._lock:
                entry = self._files.get(path)
            if entry is not None and entry[0] == signature:
                with self._lock:
                    self._files.move_to_end(path)
                continue
            lines = (_read_lines(path) or []) if signature is not None else []
            with self._lock:
                self._files[path] = (signature, lines)
                self._files.move_to_end(path)
                while len(self._files) > MAX_FILES:
                    self._files.popitem(last=False)
            changed = True
        return changed
