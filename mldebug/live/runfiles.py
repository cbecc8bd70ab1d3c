"""Read what a run directory holds for the Logs, NCCL and Anomalies tabs, with bounded work.

What is read comes back as model data (`RunFiles`, `LogTail`, `RankEvent`) for the views to
draw. Everything here runs in the poll worker thread, never on the UI thread. Each file is
read from its end only (a fixed number of bytes), and a file whose size and mtime did not
change since the last poll is not read again, so a 256-rank run costs a few `stat` calls a
second.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from functools import lru_cache, partial
from pathlib import Path

from mldebug.collect.changed import ChangedFiles
from mldebug.collect.eventfiles import parse_event_line as parse_event_line  # one parser, here too
from mldebug.collect.eventfiles import read_event_file
from mldebug.files import safeio
from mldebug.files.rundir import RunPaths
from mldebug.model import Finding, LogTail, RankEvent, RunFiles
from mldebug.nccl import scan as nccl_scan
from mldebug.nccl.follow import RunFollower
from mldebug.textsafe import printable

TAIL_BYTES = 16 * 1024  # per log file: enough for ~200 lines of training output
TAIL_LINES = 200
MAX_EVENTS = 500  # across ranks, newest kept
MAX_NCCL_FILES = 64
MAX_RANK_DIRS = 4096  # ranks whose files one poll looks at (a planted 300k would take seconds)
NCCL_RESCAN = 5.0  # seconds between two readings of the NCCL logs, at most


def _size(path: Path) -> int:
    try:
        return os.lstat(path).st_size
    except OSError:
        return -1


def read_tail(path: Path, max_bytes: int = TAIL_BYTES, max_lines: int = TAIL_LINES) -> list[str]:
    """The last lines of a file (decoded leniently); [] when it cannot be read."""
    try:
        data, start = safeio.read_tail(path, max_bytes)
    except OSError:
        return []
    text = data.decode("utf-8", errors="replace")
    lines = text.split("\n")  # not splitlines(): a lone \r is a progress bar, not a line
    if lines and lines[-1] == "":
        lines.pop()
    if start > 0 and lines:
        lines = lines[1:]  # the first line was cut in the middle
    # Progress bars rewrite one line with \r: keep what a terminal would show (a line that
    # ends in \r\n is not rewritten). Then make it safe to draw.
    lines = [printable(line.rstrip("\r").rsplit("\r", 1)[-1]) for line in lines[-max_lines:]]
    return lines


def _events_of(rank: int, path: Path) -> tuple[list[RankEvent], int]:
    return read_event_file(rank, path)


@dataclass
class RunFilesReader:
    """Reads a run directory each poll, re-reading only the files that changed."""

    root: Path
    _files: ChangedFiles = field(default_factory=ChangedFiles)
    _nccl_seen: tuple = ()  # the NCCL files' and stderr logs' sizes when last read
    _nccl_read_at: float = float("-inf")
    _nccl: tuple[tuple[Finding, ...], tuple[str, ...]] = ((), ())
    _follower: RunFollower | None = None

    def read(self) -> RunFiles:
        paths = RunPaths(self.root)
        logs: list[LogTail] = []
        events: list[RankEvent] = []
        bad = 0
        for rank in paths.rank_ids()[:MAX_RANK_DIRS]:
            for stream, path in (("stdout", paths.stdout(rank)), ("stderr", paths.stderr(rank))):
                lines = self._files.get(path, read_tail)
                if lines:
                    logs.append(LogTail(rank, stream, tuple(lines)))
            parsed = self._files.get(paths.events_file(rank), partial(_events_of, rank))
            if parsed:
                events.extend(parsed[0])
                bad += parsed[1]
        events.sort(key=lambda event: (event.time or 0.0, event.rank))
        nccl, total = self._read_nccl(paths.nccl_dir)
        findings, summary = self._nccl_findings(paths)
        findings = findings + explained_nccl(nccl, findings)
        return RunFiles(
            root=str(self.root),
            logs=tuple(logs),
            events=tuple(events[-MAX_EVENTS:]),
            bad_event_lines=bad,
            nccl=nccl,
            nccl_files_total=total,
            nccl_findings=findings,
            nccl_summary=summary,
        )

    def _nccl_findings(self, paths: RunPaths) -> tuple[tuple, tuple]:
        """mldebug.nccl over the run (NCCL logs, stderr, Flight Recorder dumps), following
        the files as they grow: again only when one changed, at most every NCCL_RESCAN s."""
        now = time.monotonic()
        if now - self._nccl_read_at < NCCL_RESCAN:
            return self._nccl
        seen: list[tuple[str | int, int]] = []
        for folder in (paths.nccl_dir, paths.root / "fr"):
            try:
                names = sorted(os.listdir(folder))[: nccl_scan.RUN_NCCL_FILES]
            except OSError:
                continue
            seen += [(name, _size(folder / name)) for name in names]
        seen += [(r, _size(paths.stderr(r))) for r in paths.rank_ids()[:MAX_RANK_DIRS]]
        if tuple(seen) == self._nccl_seen:
            return self._nccl
        self._nccl_seen, self._nccl_read_at = tuple(seen), now
        if self._follower is None:
            self._follower = RunFollower(self.root)
        result = self._follower.update()
        self._nccl = (tuple(result.findings), tuple(nccl_scan.summary_of(result)))
        return self._nccl

    def _read_nccl(self, folder: Path) -> tuple[tuple[tuple[str, tuple[str, ...]], ...], int]:
        try:
            names = sorted(name for name in os.listdir(folder) if not name.startswith("."))
        except OSError:
            return (), 0
        out = []
        for name in names[:MAX_NCCL_FILES]:
            lines = self._files.get(folder / name, read_tail) or []
            out.append((name, tuple(lines)))
        return tuple(out), len(names)


@lru_cache(maxsize=256)
def _sure_in_tail(name: str, lines: tuple[str, ...]) -> tuple[Finding, ...]:
    from mldebug.explain.engine import sure_findings

    return tuple(sure_findings(name, lines))


def explained_nccl(
    nccl: tuple[tuple[str, tuple[str, ...]], ...], known: tuple[Finding, ...]
) -> tuple[Finding, ...]:
    """What `mldebug explain` is sure the NCCL logs' tails say (interfaces, duplicate GPUs,
    NCCL's own OOM...) of kinds the run's NCCL reading did not find; each tail read once."""
    kinds = {f.kind for f in known}
    extra = [f for name, lines in nccl for f in _sure_in_tail(name, lines) if f.kind not in kinds]
    return tuple({(f.kind, f.ranks, f.location, f.recipe): f for f in extra}.values())
