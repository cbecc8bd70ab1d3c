"""The rank's memory over time: hours of points, bounded in bytes (state.json's
`memory_timeline`, docs/agent.md).

A point is [time, rss, cuda allocated, step, collectives made], taken by the heartbeat at
most once every EVERY seconds, whether or not the program counts steps (a loop with a
hand-written update has none). The newest RECENT points stay as taken; older ones are kept
at least `spacing` seconds apart, and when more than OLD of them gather the spacing doubles
and they are thinned to it: the points cover the whole life of the rank evenly (2 hours:
one point a minute or two), and the section stays under ~16 KB.

`limits` says what the memory can grow into, for a forecast: the host's total and
available memory (/proc/meminfo), the cgroup's limit and use (cgroup v2 memory.max and
memory.current), the GPU's total (NVML or torch's device properties, when CUDA is in use).
Read once every LIMITS_EVERY seconds.
"""

from __future__ import annotations

import threading
from collections import deque

EVERY = 1.0  # seconds between two points
RECENT = 120  # points kept as taken (the last two minutes at one a second)
OLD = 120  # older points, thinned by half whenever there are more
LIMITS_EVERY = 30.0
VERSION = 1
COLUMNS = ("time", "rss", "cuda", "step", "calls")


def _read_small(path: str, limit: int = 1 << 16) -> str | None:
    try:
        with open(path, "rb") as handle:
            return handle.read(limit).decode("ascii", "replace")
    except OSError:
        return None


def meminfo(path: str = "/proc/meminfo") -> dict[str, int]:
    """MemTotal and MemAvailable in bytes."""
    found: dict[str, int] = {}
    text = _read_small(path) or ""
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        if name in ("MemTotal", "MemAvailable"):
            words = rest.split()
            if words and words[0].isdigit():
                found[name] = int(words[0]) * 1024
    return found


def cgroup_memory(root: str = "/sys/fs/cgroup") -> tuple[int | None, int | None]:
    """(memory.max, memory.current) of this process's cgroup v2, None where there is none."""
    text = _read_small("/proc/self/cgroup") or ""
    path = None
    for line in text.splitlines():
        if line.startswith("0::"):
            path = line[3:].strip()
    if path is None or ".." in path.split("/"):
        return None, None
    folder = root + (path if path != "/" else "")
    limit = (_read_small(folder + "/memory.max", 64) or "").strip()
    current = (_read_small(folder + "/memory.current", 64) or "").strip()
    return (
        int(limit) if limit.isdigit() else None,
        int(current) if current.isdigit() else None,
    )


def _thinned(points: list[list], spacing: float) -> list[list]:
    kept: list[list] = []
    for point in points:
        if not kept or point[0] - kept[-1][0] >= spacing:
            kept.append(point)
    return kept


class Timeline:
    def __init__(self) -> None:
        self.recent: deque[list] = deque()
        self.old: list[list] = []
        self.spacing = EVERY  # seconds between two old points, doubled as the span grows
        self.limits: dict = {}
        self._last: float | None = None
        self._limits_at: float | None = None
        self._lock = threading.Lock()

    def add(
        self, when: float, rss: int | None, cuda: int | None, step: int | None, calls: int
    ) -> None:
        """A point, unless the last one is less than EVERY seconds old."""
        if self._last is not None and when - self._last < EVERY:
            return
        self._last = when
        with self._lock:
            self.recent.append([round(when, 2), rss, cuda, step, calls])
            if len(self.recent) > RECENT:
                point = self.recent.popleft()
                if not self.old or point[0] - self.old[-1][0] >= self.spacing:
                    self.old.append(point)
                if len(self.old) > OLD:
                    self.spacing *= 2
                    self.old = _thinned(self.old, self.spacing)

    def read_limits(self, when: float, gpu_total: int | None) -> None:
        if self._limits_at is not None and when - self._limits_at < LIMITS_EVERY:
            if gpu_total is not None:
                self.limits["gpu_total"] = gpu_total
            return
        self._limits_at = when
        info = meminfo()
        cg_max, cg_current = cgroup_memory()
        self.limits = {
            "host_total": info.get("MemTotal"),
            "host_available": info.get("MemAvailable"),
            "cgroup_max": cg_max,
            "cgroup_current": cg_current,
            "gpu_total": gpu_total,
            "time": round(when, 2),
        }

    def section(self) -> dict:
        """state.json's `memory_timeline`."""
        with self._lock:
            points = [list(p) for p in self.old] + [list(p) for p in self.recent]
        return {
            "version": VERSION,
            "every": EVERY,
            "columns": list(COLUMNS),
            "points": points,
            "limits": dict(self.limits),
        }
