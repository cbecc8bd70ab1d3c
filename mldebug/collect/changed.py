"""Values read from files, read again only when a file changed (its size or mtime): a view
that looks at a 1,024-rank run directory every second costs a `stat` per file, not a read."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any


class ChangedFiles:
    def __init__(self) -> None:
        self._cache: dict[Path, tuple[tuple[int, int], Any]] = {}

    def get(self, path: Path, read: Callable[[Path], Any]) -> Any:
        """`read(path)`, or what it gave last time when the file has not changed since;
        None when the file is not there."""
        try:
            info = os.stat(path)
        except (OSError, ValueError):
            self._cache.pop(path, None)
            return None
        key = (info.st_size, info.st_mtime_ns)
        hit = self._cache.get(path)
        if hit is not None and hit[0] == key:
            return hit[1]
        value = read(path)
        self._cache[path] = (key, value)
        return value
