"""The run directory: where every `mldebug run` keeps its manifest and the ranks' files.

Layout (see shared DESIGN):
    <run>/run.json                  manifest: command, options, ranks, pids, status, exit codes
    <run>/launcher.log              output of a wrapped launcher (`mldebug run -- torchrun ...`)
    <run>/ranks/<rank>/stdout.log   raw bytes as the rank wrote them
    <run>/ranks/<rank>/stderr.log
    <run>/ranks/<rank>/proc.json    written by the hook at start: rank, host, pid
    <run>/ranks/<rank>/error.json   the uncaught exception, if any
    <run>/ranks/<rank>/faulthandler.log  Python stacks at a fatal signal (SIGSEGV...)
    <run>/ranks/<rank>/stacks.txt   every thread's stack, written on the agent's signal
    <run>/ranks/<rank>/exit.json    written when the rank's Python shuts down normally
    <run>/ranks/<rank>/state.json   agent snapshot (later)
    <run>/ranks/<rank>/events.jsonl agent events (later)
    <run>/nccl/<host>.<pid>.log     NCCL_DEBUG_FILE output
    <run>/reports/                  reports written on request

This module is the layout (where each file is) and the discovery of runs (which are this
user's, which is the newest live one). Everything in a run directory is input, possibly
planted by someone else: its files are read and written only through `files/safeio.py` (no
symlink followed, every read capped); `files/procfs.py` reads what /proc says about a process.

Stdlib only: the in-rank agent loads it by path (as `_mldebug.rundir`, with its siblings).
"""

from __future__ import annotations

import functools
import math
import os
import socket
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from .procfs import pid_alive
from .safeio import is_private_dir, make_private_dir, read_json

MANIFEST = "run.json"

STATUS_RUNNING = "running"
STATUS_SUCCEEDED = "succeeded"
STATUS_FAILED = "failed"
STATUS_INTERRUPTED = "interrupted"

# Caps on what is read from a run directory. run.json for 1,024 ranks is about 150 KB.
MAX_MANIFEST_BYTES = 8 << 20  # run.json of some 50,000 ranks
MAX_RANK = 1 << 20  # a rank number at or beyond this is garbage, not a rank
ENV_RUN_DIR = "MLDEBUG_RUN_DIR"  # the variable that ties a process to its run directory


def runs_root() -> Path:
    """Where runs live unless --run-dir says otherwise (one place per user)."""
    if os.environ.get("MLDEBUG_RUNS_DIR"):
        return Path(os.environ["MLDEBUG_RUNS_DIR"])
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(Path.home(), ".local", "state")
    return Path(state) / "mldebug" / "runs"


def new_run_id(now: float | None = None) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now or time.time()))
    return f"{stamp}-{os.getpid()}"


@functools.lru_cache(maxsize=1 << 16)
def _in_rank_dir(root: Path, rank: int, name: str) -> Path:
    """<root>/ranks/<rank>/<name> (the rank's folder for ""): made once, a view of 1,024 ranks
    asks for their files at every poll."""
    folder = root / "ranks" / str(rank)
    return folder / name if name else folder


@dataclass(frozen=True)
class RunPaths:
    """Pure path arithmetic over one run directory."""

    root: Path

    @property
    def manifest(self) -> Path:
        return self.root / MANIFEST

    @property
    def launcher_log(self) -> Path:
        return self.root / "launcher.log"

    @property
    def ranks_dir(self) -> Path:
        return self.root / "ranks"

    @property
    def nccl_dir(self) -> Path:
        return self.root / "nccl"

    @property
    def reports_dir(self) -> Path:
        return self.root / "reports"

    def rank_dir(self, rank: int) -> Path:
        return _in_rank_dir(self.root, rank, "")

    def stdout(self, rank: int) -> Path:
        return _in_rank_dir(self.root, rank, "stdout.log")

    def stderr(self, rank: int) -> Path:
        return _in_rank_dir(self.root, rank, "stderr.log")

    def proc_info(self, rank: int) -> Path:
        return _in_rank_dir(self.root, rank, "proc.json")

    def error_file(self, rank: int) -> Path:
        return _in_rank_dir(self.root, rank, "error.json")

    def exit_file(self, rank: int) -> Path:
        """Written at a normal interpreter shutdown: its absence after the rank is gone
        means it died abruptly (a signal, os._exit)."""
        return _in_rank_dir(self.root, rank, "exit.json")

    def fault_log(self, rank: int) -> Path:
        """Python stacks faulthandler writes when the rank dies of a fatal signal."""
        return _in_rank_dir(self.root, rank, "faulthandler.log")

    def stacks_file(self, rank: int) -> Path:
        """Every thread's Python stack, written by faulthandler in the rank when `dump` sends
        the signal its agent registered (agent/stacksignal.py): read when ptrace is refused
        and the agent's thread (agent/stackthread.py) does not answer."""
        return _in_rank_dir(self.root, rank, "stacks.txt")

    def state_file(self, rank: int) -> Path:
        return _in_rank_dir(self.root, rank, "state.json")

    def events_file(self, rank: int) -> Path:
        return _in_rank_dir(self.root, rank, "events.jsonl")

    def rank_ids(self) -> list[int]:
        """Ranks that have a directory here, in order: only names rank_dir() would give
        ("7", not "007", "²", "--x" or a number beyond MAX_RANK)."""
        try:
            names = os.listdir(self.ranks_dir)
        except OSError:
            return []
        ranks = ((name, parse_rank(name)) for name in names)
        return sorted(rank for name, rank in ranks if rank is not None and str(rank) == name)


def parse_rank(value: object) -> int | None:
    """A rank number from a file or a directory name (an int, or ASCII digits), or None
    for anything else: "²", "-1", True, 1.5, a number of 5,000 digits."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        # isascii: "²".isdigit() is true too, and int() refuses it; the length check keeps
        # int() from parsing thousands of digits.
        if not (value.isascii() and value.isdigit() and 0 < len(value) < 10):
            return None
        value = int(value)
    return value if isinstance(value, int) and 0 <= value < MAX_RANK else None


def _absolute_unresolved(path: str | os.PathLike) -> Path:
    """`path` made absolute with its parent resolved but not its last part: a symlink put
    in place of a directory stays a symlink (and is refused), it is not followed."""
    absolute = os.path.abspath(path)
    parent, name = os.path.split(absolute)
    if not name:  # "/"
        return Path(absolute)
    return Path(parent).resolve() / name


def create_run_dir(run_dir: str | os.PathLike | None = None) -> RunPaths:
    """Make a fresh run directory; a custom one is linked from runs_root() so it is found.

    Raises UntrustedDirError for a runs root or run directory that is a symlink, someone
    else's, or writable by group or others."""
    root = runs_root()
    make_private_dir(root)
    if run_dir is None:
        paths = RunPaths(root / new_run_id())
        make_private_dir(paths.root)
    else:
        paths = RunPaths(_absolute_unresolved(run_dir))
        make_private_dir(paths.root)
        link = root / new_run_id()
        try:
            link.symlink_to(paths.root, target_is_directory=True)
        except OSError:
            pass  # discovery by --run still works; only "newest run" will not see it
    make_private_dir(paths.ranks_dir)
    return paths


def read_manifest(root: str | os.PathLike) -> dict | None:
    return read_json(RunPaths(Path(root)).manifest, MAX_MANIFEST_BYTES)


def same_dir(a: str | os.PathLike | None, b: str | os.PathLike | None) -> bool:
    """Do the two paths name one directory (same device and inode)?"""
    if not a or not b:
        return False
    try:
        first, second = os.stat(a), os.stat(b)
    except (OSError, ValueError):
        return False
    return stat.S_ISDIR(first.st_mode) and (first.st_dev, first.st_ino) == (
        second.st_dev,
        second.st_ino,
    )


def _number(value: object) -> float:
    """A finite number from a file, or 0."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return 0.0
    try:
        number = float(value)
    except OverflowError:
        return 0.0
    return number if math.isfinite(number) else 0.0


def is_live(manifest: dict) -> bool:
    return manifest.get("status") == STATUS_RUNNING and pid_alive(manifest.get("mldebug_pid"))


def list_runs() -> list[tuple[Path, dict]]:
    """All runs under runs_root(), newest first, with their manifests.

    Only private directories count: a runs root anyone else can write to is not looked in,
    and an entry (a custom --run-dir is a symlink here) that leads to a directory someone
    else owns or can write to is skipped, so a planted run never becomes "the newest run".
    """
    root = runs_root()
    if not is_private_dir(root):
        return []
    try:
        entries = list(root.iterdir())
    except OSError:
        return []
    runs = []
    for entry in entries:
        try:
            target = entry.resolve(strict=True)
        except (OSError, RuntimeError):  # RuntimeError: a symlink loop (Python < 3.13)
            continue
        if not is_private_dir(target):
            continue
        manifest = read_manifest(target)
        if manifest is not None:
            runs.append((target, manifest))
    runs.sort(key=lambda item: _number(item[1].get("start_time")), reverse=True)
    return runs


def newest_live_run() -> Path | None:
    """The newest `mldebug run` of this user whose supervisor is still alive."""
    for path, manifest in list_runs():
        if is_live(manifest):
            return path
    return None


def hostname() -> str:
    return socket.gethostname().split(".")[0]
