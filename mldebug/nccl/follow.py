"""A run directory's NCCL logs and ranks' stderr, followed as they grow (the live view).

Each file keeps its parser between updates and is fed only the bytes written since the last
one, at most UPDATE_BYTES in all per update: what an update costs follows how fast the logs
grow, not how large they are. A file replaced or cut shorter starts over; a rank's stderr
is first read from its last `stderr_tail` bytes, its stdout up to STDOUT_HEAD only. Flight Recorder dumps are read again when
their size or time changes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from mldebug import flight
from mldebug.files import rundir, safeio
from mldebug.nccl.logparse import CHUNK, MAX_LINE, FileLog, LogParser
from mldebug.nccl.scan import RUN_NCCL_FILES, RUN_RANKS, Scan, finish, join_pids

UPDATE_BYTES = 16 << 20  # read per update, all files together
FILE_BYTES = 4 << 20  # read per update from one file
STDERR_TAIL = 64 << 10
STDOUT_HEAD = 256 << 10


@dataclass
class _Followed:
    parser: LogParser
    inode: tuple[int, int]
    offset: int


class RunFollower:
    def __init__(self, root: str | Path, stderr_tail: int = STDERR_TAIL) -> None:
        self.paths = rundir.RunPaths(Path(root))
        self.stderr_tail = stderr_tail
        self._files: dict[Path, _Followed] = {}
        self._dumps: dict[Path, tuple[tuple, object]] = {}

    def _targets(self) -> list[tuple[Path, int | None, int | None, int | None]]:
        """(path, rank, tail, head): read from `tail` bytes before the end, or up to `head`."""
        found: list[tuple[Path, int | None, int | None, int | None]] = []
        try:
            names = sorted(n for n in os.listdir(self.paths.nccl_dir) if not n.startswith("."))
        except OSError:
            names = []
        found += [(self.paths.nccl_dir / n, None, None, None) for n in names[:RUN_NCCL_FILES]]
        for rank in self.paths.rank_ids()[:RUN_RANKS]:
            found.append((self.paths.stderr(rank), rank, self.stderr_tail, None))
            # NCCL_DEBUG without NCCL_DEBUG_FILE writes to stdout: its init lines come first.
            found.append((self.paths.stdout(rank), rank, None, STDOUT_HEAD))
        return found

    def _advance(
        self, path: Path, rank: int | None, tail: int | None, head: int | None, budget: int
    ) -> int:
        """Feed `path`'s new bytes to its parser; how many were read."""
        try:
            fd = safeio.open_regular(path)
        except OSError:
            self._files.pop(path, None)
            return 0
        try:
            info = os.fstat(fd)
            followed = self._files.get(path)
            inode = (info.st_dev, info.st_ino)
            if followed is None or followed.inode != inode or info.st_size < followed.offset:
                start = max(0, info.st_size - tail) if tail else 0
                followed = _Followed(LogParser(str(path), rank), inode, start)
                if start:  # begin after the line the tail cut
                    os.lseek(fd, start, os.SEEK_SET)
                    cut = os.read(fd, MAX_LINE)
                    newline = cut.find(b"\n")
                    followed.offset += newline + 1 if newline != -1 else len(cut)
                self._files[path] = followed
            end = info.st_size if head is None else min(info.st_size, head)
            want = min(end - followed.offset, budget, FILE_BYTES)
            read = 0
            os.lseek(fd, followed.offset, os.SEEK_SET)
            while read < want:
                chunk = os.read(fd, min(CHUNK, want - read))
                if not chunk:
                    break
                followed.parser.feed(chunk)
                read += len(chunk)
            followed.offset += read
            return read
        except OSError:
            return 0
        finally:
            os.close(fd)

    def _read_dumps(self, scan: Scan) -> None:
        folder = self.paths.root / "fr"
        try:
            names = sorted(n for n in os.listdir(folder) if not n.startswith("."))
        except OSError:
            names = []
        for name in names[:RUN_RANKS]:
            path = folder / name
            try:
                info = os.lstat(path)
            except OSError:
                continue
            key = (info.st_ino, info.st_size, info.st_mtime_ns)
            known = self._dumps.get(path)
            if known is None or known[0] != key:
                try:
                    head = safeio.read_head(path, 4096)
                    dump = (
                        flight.read_flight_dump(str(path))
                        if flight.looks_like_flight_dump(str(path), head)
                        else None
                    )
                except (OSError, flight.FlightDumpError):
                    dump = None
                self._dumps[path] = known = (key, dump)
            if known[1] is not None:
                scan.dumps.append(known[1])

    def update(self) -> Scan:
        """What the run's files say now, after reading what they gained since the last call."""
        budget = UPDATE_BYTES
        targets = self._targets()
        for path, rank, tail, head in targets:
            if budget <= 0:
                break
            budget -= self._advance(path, rank, tail, head, budget)
        present = {target[0] for target in targets}
        for gone in set(self._files) - present:
            del self._files[gone]
        scan = Scan()
        for path, followed in self._files.items():
            parser = followed.parser
            scan.logs.append(FileLog(str(path), parser.snapshot(), followed.offset, parser.lines))
        self._read_dumps(scan)
        join_pids(scan, self.paths)
        return finish(scan)
