"""The run directory: where every `mldebug run` keeps its manifest and the ranks' files.

Layout (see shared DESIGN):
    <run>/run.json                  manifest: command, options, ranks, pids, status, exit codes
    <run>/launcher.log              output of a wrapped launcher (`mldebug run -- torchrun ...`)
    <run>/ranks/<rank>/stdout.log   raw bytes as the rank wrote them
    <run>/ranks/<rank>/stderr.log
    <run>/ranks/<rank>/proc.json    written by the hook at start: rank, host, pid
    <run>/ranks/<rank>/error.json   the uncaught exception, if any
    <run>/ranks/<rank>/faulthandler.log  Python stacks at a fatal signal (SIGSEGV...)
    <run>/ranks/<rank>/exit.json    written when the rank's Python shuts down normally
    <run>/ranks/<rank>/state.json   agent snapshot (later)
    <run>/ranks/<rank>/events.jsonl agent events (later)
    <run>/nccl/<host>.<pid>.log     NCCL_DEBUG_FILE output
    <run>/reports/                  reports written on request

Everything in a run directory is input, possibly planted by someone else: every file here
is opened without following symlinks, read with a size cap, and refused unless it is a
regular file (a FIFO would block a read forever); a run directory is used only when it is
this user's and nobody else can write to it. The rest of mldebug reads and writes run
directories through this module only.

Stdlib only: the in-rank hooks import this module (by path, as `_mldebug_rundir`).
"""

from __future__ import annotations

import errno
import json
import math
import os
import socket
import stat
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

MANIFEST = "run.json"

STATUS_RUNNING = "running"
STATUS_SUCCEEDED = "succeeded"
STATUS_FAILED = "failed"
STATUS_INTERRUPTED = "interrupted"

# Caps on what is read from a run directory. run.json for 1,024 ranks is about 150 KB.
MAX_JSON_BYTES = 4 << 20
MAX_MANIFEST_BYTES = 8 << 20  # run.json of some 50,000 ranks
MAX_RANK = 1 << 20  # a rank number at or beyond this is garbage, not a rank
MAX_ENVIRON_BYTES = 4 << 20  # /proc/<pid>/environ (the kernel caps it near ARG_MAX)
ENV_RUN_DIR = "MLDEBUG_RUN_DIR"  # the variable that ties a process to its run directory
MAX_JSON_DEPTH = 32  # run.json nests 4 deep; deeper is garbage (and a RecursionError risk)

_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_APPEND_FLAGS = (
    os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
)


class UntrustedDirError(OSError):
    """A directory mldebug would write to or read from that someone else controls."""


def runs_root() -> Path:
    """Where runs live unless --run-dir says otherwise (one place per user)."""
    if os.environ.get("MLDEBUG_RUNS_DIR"):
        return Path(os.environ["MLDEBUG_RUNS_DIR"])
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(Path.home(), ".local", "state")
    return Path(state) / "mldebug" / "runs"


def new_run_id(now: float | None = None) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now or time.time()))
    return f"{stamp}-{os.getpid()}"


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
        return self.ranks_dir / str(rank)

    def stdout(self, rank: int) -> Path:
        return self.rank_dir(rank) / "stdout.log"

    def stderr(self, rank: int) -> Path:
        return self.rank_dir(rank) / "stderr.log"

    def proc_info(self, rank: int) -> Path:
        return self.rank_dir(rank) / "proc.json"

    def error_file(self, rank: int) -> Path:
        return self.rank_dir(rank) / "error.json"

    def exit_file(self, rank: int) -> Path:
        """Written at a normal interpreter shutdown: its absence after the rank is gone
        means it died abruptly (a signal, os._exit)."""
        return self.rank_dir(rank) / "exit.json"

    def fault_log(self, rank: int) -> Path:
        """Python stacks faulthandler writes when the rank dies of a fatal signal."""
        return self.rank_dir(rank) / "faulthandler.log"

    def state_file(self, rank: int) -> Path:
        return self.rank_dir(rank) / "state.json"

    def events_file(self, rank: int) -> Path:
        return self.rank_dir(rank) / "events.jsonl"

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


def check_private_dir(path: Path) -> None:
    """Raise UntrustedDirError unless `path` is a real directory (not a symlink) owned by
    this user that no one else can write to."""
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise UntrustedDirError(errno.ENOTDIR, "not a directory (a symlink or a file)", str(path))
    if info.st_uid != os.geteuid():
        raise UntrustedDirError(errno.EPERM, f"owned by uid {info.st_uid}, not you", str(path))
    if info.st_mode & 0o022:
        raise UntrustedDirError(
            errno.EPERM, f"writable by others (mode {stat.S_IMODE(info.st_mode):o})", str(path)
        )


def make_private_dir(path: Path) -> Path:
    """Create a directory (and parents) readable by this user only, or check that the one
    there is such a directory: an existing one someone else owns or can write is refused."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    check_private_dir(path)
    return path


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


def open_regular(path: str | os.PathLike) -> int:
    """A read-only descriptor of a regular file, never through a symlink and never blocking
    (a FIFO or device in its place raises OSError instead of hanging the reader)."""
    fd = os.open(path, _READ_FLAGS)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read_fd(fd: int, limit: int) -> bytes:
    chunks, left = [], limit
    while left > 0:
        data = os.read(fd, min(left, 1 << 20))
        if not data:
            break
        chunks.append(data)
        left -= len(data)
    return b"".join(chunks)


def read_head(path: str | os.PathLike, limit: int) -> bytes:
    """At most the first `limit` bytes of a regular file. Raises OSError."""
    fd = open_regular(path)
    try:
        return _read_fd(fd, limit)
    finally:
        os.close(fd)


def read_tail(path: str | os.PathLike, limit: int) -> tuple[bytes, int]:
    """At most the last `limit` bytes of a regular file, and the offset they start at.
    Raises OSError."""
    fd = open_regular(path)
    try:
        start = max(0, os.fstat(fd).st_size - limit)
        os.lseek(fd, start, os.SEEK_SET)
        return _read_fd(fd, limit), start
    finally:
        os.close(fd)


def json_depth_ok(value: object, limit: int = MAX_JSON_DEPTH) -> bool:
    """True when `value` nests no deeper than `limit` (checked level by level, without
    recursion, looking only at containers: a list of 300,000 small objects is quick)."""
    level = [value] if isinstance(value, (dict, list)) else []
    depth = 1
    while level:
        if depth > limit:
            return False
        deeper = []
        for item in level:
            for child in item.values() if isinstance(item, dict) else item:
                if isinstance(child, (dict, list)):
                    deeper.append(child)
        level, depth = deeper, depth + 1
    return True


def read_json(path: str | os.PathLike, limit: int = MAX_JSON_BYTES) -> dict | None:
    """A JSON object from a file, or None when it is missing, not a regular file, larger
    than `limit`, nested too deep, or not a JSON object."""
    try:
        data = read_head(path, limit + 1)
    except OSError:
        return None
    if len(data) > limit:
        return None
    try:
        value = json.loads(data.decode("utf-8", errors="replace"))
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) and json_depth_ok(value) else None


def open_append(path: str | os.PathLike) -> int:
    """A descriptor to append to a regular file of this user's (created 0600), never
    through a symlink; a FIFO or device planted at the name is refused."""
    fd = os.open(path, _APPEND_FLAGS, 0o600)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def create_new(path: str | os.PathLike) -> int:
    """A descriptor of a file created by this call (0600): an existing name, a symlink
    included, is an error (FileExistsError), so nothing planted is ever written through."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)


def write_json_atomic(path: Path, data: dict) -> None:
    """Write-then-rename so a reader never sees half a file. The temporary file is created
    exclusively under a random name, and rename replaces a symlink at `path` rather than
    writing through it."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=1, default=str)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def read_manifest(root: str | os.PathLike) -> dict | None:
    return read_json(RunPaths(Path(root)).manifest, MAX_MANIFEST_BYTES)


def pid_alive(pid: int | None) -> bool:
    if not pid or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError):  # OverflowError: no pid is that large
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); treat it as gone.
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return True


def proc_stat(pid: int | str = "self") -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name: [state, ppid, pgrp, ...].

    Index 19 is the start time in clock ticks since boot: with the pid, it names one
    process for good (a pid alone may be reused).
    """
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            return handle.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def proc_start_ticks(pid: int | str = "self") -> int | None:
    fields = proc_stat(pid)
    try:
        return int(fields[19]) if fields else None
    except (ValueError, IndexError):
        return None


def proc_environ(pid: int) -> dict[str, str] | None:
    """The environment a process started with (/proc/<pid>/environ, size-capped), or None
    when it cannot be read (gone, another user's)."""
    try:
        with open(f"/proc/{int(pid)}/environ", "rb") as handle:
            data = handle.read(MAX_ENVIRON_BYTES)
    except (OSError, ValueError, OverflowError):
        return None
    environ = {}
    for item in data.split(b"\0"):
        name, sep, value = item.partition(b"=")
        if sep:
            environ[name.decode("utf-8", "replace")] = value.decode("utf-8", "replace")
    return environ


def proc_uids(pid: int) -> tuple[int, int] | None:
    """(real, effective) uid of a process, or None."""
    try:
        with open(f"/proc/{int(pid)}/status", encoding="ascii", errors="replace") as handle:
            for line in handle:
                if line.startswith("Uid:"):
                    real, effective = line.split()[1:3]
                    return int(real), int(effective)
    except (OSError, ValueError, OverflowError):
        pass
    return None


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


def descends_from(pid: int, ancestor: int, ancestor_ticks: int | None, max_hops: int = 256) -> bool:
    """Is `pid` a descendant of the process `ancestor` that started at `ancestor_ticks`?

    Walks the ppid chain in /proc; the start time makes a reused pid count as a different
    process. A process whose ancestor has already exited was handed to another parent and
    cannot be told apart any more (False).
    """
    current = pid
    for _ in range(max_hops):
        fields = proc_stat(current)
        if not fields or len(fields) < 2 or not fields[1].isdigit():
            return False
        parent = int(fields[1])
        if parent == ancestor:
            return ancestor_ticks is not None and proc_start_ticks(ancestor) == ancestor_ticks
        if parent <= 1:
            return False
        current = parent
    return False


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


def is_private_dir(path: str | os.PathLike) -> bool:
    """check_private_dir as a question: False for anything it refuses, or cannot look at."""
    try:
        check_private_dir(Path(path))
    except OSError:
        return False
    return True


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
