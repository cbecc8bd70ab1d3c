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

Stdlib only: the in-rank hooks import this module.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

MANIFEST = "run.json"

STATUS_RUNNING = "running"
STATUS_SUCCEEDED = "succeeded"
STATUS_FAILED = "failed"
STATUS_INTERRUPTED = "interrupted"


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
        """Ranks that have a directory here, in order."""
        try:
            names = os.listdir(self.ranks_dir)
        except OSError:
            return []
        return sorted(int(n) for n in names if n.isdigit())


def make_private_dir(path: Path) -> Path:
    """Create a directory (and parents) readable by this user only."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    return path


def create_run_dir(run_dir: str | os.PathLike | None = None) -> RunPaths:
    """Make a fresh run directory; a custom one is linked from runs_root() so it is found."""
    root = runs_root()
    make_private_dir(root)
    if run_dir is None:
        paths = RunPaths(root / new_run_id())
        make_private_dir(paths.root)
    else:
        paths = RunPaths(Path(run_dir).resolve())
        make_private_dir(paths.root)
        link = root / new_run_id()
        try:
            link.symlink_to(paths.root, target_is_directory=True)
        except OSError:
            pass  # discovery by --run still works; only "newest run" will not see it
    make_private_dir(paths.ranks_dir)
    return paths


def write_json_atomic(path: Path, data: dict) -> None:
    """Write-then-rename so a reader never sees half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(data, handle, indent=1, default=str)
    os.replace(tmp, path)


def read_json(path: Path) -> dict | None:
    """A JSON object from a file, or None when it is missing or not valid JSON."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_manifest(root: str | os.PathLike) -> dict | None:
    return read_json(RunPaths(Path(root)).manifest)


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


def is_live(manifest: dict) -> bool:
    return manifest.get("status") == STATUS_RUNNING and pid_alive(manifest.get("mldebug_pid"))


def list_runs() -> list[tuple[Path, dict]]:
    """All runs under runs_root(), newest first, with their manifests."""
    root = runs_root()
    try:
        entries = list(root.iterdir())
    except OSError:
        return []
    runs = []
    for entry in entries:
        manifest = read_manifest(entry)
        if manifest is not None:
            runs.append((entry.resolve(), manifest))
    runs.sort(key=lambda item: item[1].get("start_time") or 0, reverse=True)
    return runs


def newest_live_run() -> Path | None:
    """The newest `mldebug run` of this user whose supervisor is still alive."""
    for path, manifest in list_runs():
        if is_live(manifest):
            return path
    return None


def hostname() -> str:
    return socket.gethostname().split(".")[0]
