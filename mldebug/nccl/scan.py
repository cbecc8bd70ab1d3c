"""Walk files and directories for NCCL logs, torch error text and Flight Recorder dumps.

`scan_paths` is what `mldebug nccl PATH...` reads: any mix of files and directories. A file
named on the command line is read whatever it holds; inside a directory, files that are
plainly something else (JSON, Python, binaries) are passed over. `scan_run` is what
`mldebug dump --run` and the live view read of a run directory: `nccl/*` (NCCL_DEBUG_FILE
output), the tail of each rank's stderr.log (where torch writes the watchdog's and gloo's
errors), the head of its stdout.log (NCCL_DEBUG without a file writes there) and the Flight
Recorder dumps in `fr/`, each bounded. Symbolic links are never
followed; every read is capped (logparse, flight).
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mldebug import flight
from mldebug.files import rundir, safeio
from mldebug.flight import pool as flight_pool
from mldebug.model import KIND_FR_UNREAD, SEVERITY_INFO, Finding
from mldebug.nccl import compare, ranklog
from mldebug.nccl.logparse import FileLog, parse_file
from mldebug.ras import read as ras_read
from mldebug.ras import verdict as ras_verdict

MAX_FILES = 20_000  # files looked at under the paths given
MAX_DEPTH = 8
FR_REQUEST = "request"  # <run>/fr/request: asks the ranks for dumps (launch/flight.py)
HEAD_BYTES = 4096  # what decides whether a file is a Flight Recorder dump
SKIP_SUFFIXES = (".json", ".jsonl", ".py", ".pyc", ".md", ".pt", ".pth", ".npy", ".so", ".svg")
# A run directory, read by `dump --run` and the live view: bounded per file and in all.
RUN_NCCL_FILES = 1024
RUN_NCCL_BYTES = 32 << 20  # the head of one NCCL log (init, transport and WARNs come early)
RUN_NCCL_TOTAL = 256 << 20  # all NCCL logs together: a second or two of reading
RUN_STDERR_TAIL = 256 << 10  # the end of one rank's stderr (the errors), the head of stdout
RUN_STDERR_TOTAL = 64 << 20  # all ranks' stderr tails together, and stdout heads
RUN_RANKS = 4096
# Reading a run's Flight Recorder dumps for `dump` and the hang report stops after this
# long (2,000 entries take about 0.05 s): `mldebug nccl RUN/fr` reads them all.
RUN_FR_SECONDS = 10.0


@dataclass
class Scan:
    """What was read, and what it says."""

    logs: list[FileLog] = field(default_factory=list)
    dumps: list = field(default_factory=list)  # flight.FlightDump
    # dumps found by the walk, read together after it (by worker processes: flight_pool)
    dump_paths: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # one line per path not read
    skipped: int = 0  # files in directories passed over (not logs)
    ranks: list[ranklog.RankLog] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    ras: list = field(default_factory=list)  # ras.model.RasReport: saved `ncclras` answers

    @property
    def files_read(self) -> int:
        return sum(1 for log in self.logs if log.error is None) + len(self.dumps) + len(self.ras)

    @property
    def recognised(self) -> bool:
        """Did any file hold an NCCL, torch.distributed or Flight Recorder line?"""
        return bool(self.dumps) or bool(self.ras) or any(log.said_anything for log in self.ranks)


def _walk(root: Path, scan: Scan, depth: int = 0) -> Iterator[Path]:
    """Regular files under `root`, sorted, without following a symlink."""
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError as error:
        scan.problems.append(f"{root}: cannot list it ({error.strerror or error})")
        return
    for entry in entries:
        if entry.name.startswith("."):
            continue
        try:
            if entry.is_dir(follow_symlinks=False):
                if depth < MAX_DEPTH:
                    yield from _walk(Path(entry.path), scan, depth + 1)
            elif entry.is_file(follow_symlinks=False):
                yield Path(entry.path)
        except OSError:
            continue


def _head(path: Path) -> bytes | None:
    try:
        return safeio.read_head(path, HEAD_BYTES)
    except OSError:
        return None


def read_dumps(scan: Scan, deadline: float | None = None) -> int:
    """Read the dumps the walk found, all at once: by worker processes where there are
    cores and files enough (flight_pool), each summarised as it is read. Returns how many
    were left unread at `deadline`."""
    paths, scan.dump_paths = scan.dump_paths, []
    read, problems, unread = flight_pool.read_flight_dumps(paths, deadline)
    scan.dumps += read
    scan.problems += problems
    return unread


def _one(
    path: Path,
    scan: Scan,
    named: bool,
    dumps_only: bool = False,
    parse_logs: bool = True,
    **limits: Any,
) -> None:
    head = _head(path)
    if head is None:
        log = parse_file(str(path), **limits)  # says why it cannot be read
        scan.problems.append(f"{path}: {log.error or 'cannot be read'}")
        return
    if flight.looks_like_flight_dump(str(path), head):
        scan.dump_paths.append(str(path))  # read after the walk, together (read_dumps)
        return
    if not dumps_only and ras_read.looks_like_ras(head):  # `ncclras` output, text or JSON
        try:
            scan.ras.append(ras_read.read_ras_file(str(path)))
        except ras_read.RasError as error:
            scan.problems.append(str(error))
        return
    if not named and (not head or path.name == FR_REQUEST):
        scan.skipped += 1  # an empty file, or the run's request for Flight Recorder dumps
        return
    if dumps_only or (not named and (path.name.endswith(SKIP_SUFFIXES) or b"\0" in head)):
        scan.skipped += 1
        return
    if not parse_logs:  # the caller reads the log itself (explain: one pass for both)
        scan.logs.append(FileLog(str(path), []))
        return
    log = parse_file(str(path), **limits)
    if log.error is not None:
        scan.problems.append(f"{path}: {log.error}")
    scan.logs.append(log)


def finish(scan: Scan) -> Scan:
    procs = [proc for log in scan.logs for proc in log.procs]
    scan.ranks = ranklog.ranks_of(procs)
    scan.findings = compare.compare(scan.ranks)
    if scan.dumps:
        scan.findings += flight.compare_flight_dumps(scan.dumps)
    scan.findings += ras_verdict.ras_findings(scan.ras)
    return scan


def scan_paths(paths: list[str], max_files: int = MAX_FILES, parse_logs: bool = True) -> Scan:
    """Read every file named and every file under every directory named (`parse_logs`
    False: the logs are only listed, in `logs`, for the caller to read)."""
    scan = Scan()
    count = 0
    runs: list[rundir.RunPaths] = []
    for name in paths:
        path = Path(name)
        try:
            info = os.lstat(path)
        except OSError as error:
            scan.problems.append(f"{name}: {error.strerror or error}")
            continue
        if stat.S_ISLNK(info.st_mode):
            scan.problems.append(f"{name}: a symbolic link; give the file it points to")
            continue
        if stat.S_ISDIR(info.st_mode):
            if os.path.isdir(path / "ranks"):  # a run directory: its ranks' pids are known
                runs.append(rundir.RunPaths(path))
            for file in _walk(path, scan):
                if count >= max_files:
                    scan.problems.append(f"{name}: more than {max_files} files; the rest not read")
                    break
                count += 1
                _one(file, scan, named=False, parse_logs=parse_logs)
        elif stat.S_ISREG(info.st_mode):
            count += 1
            _one(path, scan, named=True, parse_logs=parse_logs)
        else:
            scan.problems.append(f"{name}: not a regular file or directory")
    read_dumps(scan)
    for run in runs:
        join_pids(scan, run)
    return finish(scan)


def run_has_logs(root: str | Path) -> bool:
    """Does a run directory hold NCCL logs or Flight Recorder dumps? (A few listdir calls:
    `dump` reads a run's files only when so, or when a rank failed.)"""
    paths = rundir.RunPaths(Path(root))
    for folder in (paths.nccl_dir, paths.root / "fr"):
        try:
            if any(not name.startswith(".") for name in os.listdir(folder)):
                return True
        except OSError:
            continue
    return False


def scan_run(root: str | Path, stderr_tail: int = RUN_STDERR_TAIL) -> Scan:
    """A run directory's NCCL logs, ranks' stderr tails and Flight Recorder dumps."""
    paths = rundir.RunPaths(Path(root))
    scan = Scan()
    try:
        names = sorted(n for n in os.listdir(paths.nccl_dir) if not n.startswith("."))
    except OSError:
        names = []
    names = names[:RUN_NCCL_FILES]
    limit = max(1 << 20, min(RUN_NCCL_BYTES, RUN_NCCL_TOTAL // max(1, len(names))))
    for name in names:
        _one(paths.nccl_dir / name, scan, named=False, limit=limit)
    ranks = paths.rank_ids()[:RUN_RANKS]
    tail = max(16 << 10, min(stderr_tail, RUN_STDERR_TOTAL // max(1, len(ranks))))
    for rank in ranks:
        # NCCL_DEBUG without NCCL_DEBUG_FILE writes to stdout: its init lines come first.
        for path, limits in (
            (paths.stderr(rank), {"tail": tail}),
            (paths.stdout(rank), {"limit": tail}),
        ):
            if os.path.lexists(path):
                log = parse_file(str(path), rank=rank, **limits)
                if log.error is None:
                    scan.logs.append(log)
    try:
        dumps = sorted(n for n in os.listdir(paths.root / "fr") if not n.startswith("."))
    except OSError:
        dumps = []
    started = time.monotonic()
    fr = [paths.root / "fr" / name for name in dumps[:RUN_RANKS]]
    found = [str(p) for p in fr if flight.looks_like_flight_dump(str(p), _head(p) or b"")]
    scan.skipped += len(fr) - len(found)
    scan.dump_paths += found
    unread = read_dumps(scan, started + RUN_FR_SECONDS)
    join_pids(scan, paths)
    finish(scan)
    if unread:
        scan.findings.append(
            Finding(
                KIND_FR_UNREAD,
                (),
                f"{unread} of {min(len(dumps), RUN_RANKS)} Flight Recorder dumps were not read "
                f"within {RUN_FR_SECONDS:g} s; `mldebug nccl {paths.root / 'fr'}` reads them all",
                recipe="rank-behind",
                severity=SEVERITY_INFO,
            )
        )
    return scan


def join_pids(scan: Scan, paths: rundir.RunPaths) -> None:
    """Ranks of processes that said no rank of theirs (an NCCL log of a process whose
    communicators all failed), from the rank's own proc.json: same host, same pid."""
    unknown = [p for log in scan.logs for p in log.procs if p.rank is None and p.pid is not None]
    if not unknown:
        return
    known: dict[int | None, tuple[int | None, object]] = {}  # pid -> (rank, host)
    for rank in paths.rank_ids()[:RUN_RANKS]:
        info = safeio.read_json(paths.proc_info(rank), 64 << 10) or {}
        pid = info.get("pid")
        if isinstance(pid, int) and not isinstance(pid, bool):
            known[pid] = (rank, info.get("host"))
    for proc in unknown:
        claimed, host = known.get(proc.pid, (None, None))
        if claimed is not None and (not host or not proc.host or str(host).startswith(proc.host)):
            proc.claim_rank(claimed, 3)


def run_findings(root: str | Path | None, failed: bool = False) -> list[Finding]:
    """What a run directory's NCCL logs, stderr tails and Flight Recorder dumps say, for
    `mldebug dump`: nothing is read unless the run has NCCL logs or dumps, or `failed`
    (a rank ended badly: its stderr may hold the watchdog's or gloo's error)."""
    if root is None or not (failed or run_has_logs(root)):
        return []
    return scan_run(root).findings


def summary_of(scan: Scan, max_lines: int = 400) -> list[str]:
    """Each rank's summary lines, then each Flight Recorder dump's, capped."""
    lines = [line for log in scan.ranks if log.said_anything for line in ranklog.summary_lines(log)]
    for dump in scan.dumps:
        lines += flight.summarize_flight_dump(dump)
    return lines[:max_lines]
