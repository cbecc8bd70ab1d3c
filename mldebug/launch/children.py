"""The job's own processes: start each in a session of its own with its output in pipes,
know which ended and which failed first, find the process groups to end. The supervisor
polls them and decides; this module only starts, tracks and names them (torch elastic's
`PContext` does the same for its workers).
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from mldebug.files.procfs import proc_start_ticks, proc_stat
from mldebug.files.rundir import STATUS_FAILED, STATUS_INTERRUPTED, STATUS_SUCCEEDED, RunPaths
from mldebug.files.safeio import UntrustedDirError, make_private_dir
from mldebug.launch.coredumps import CoreCatcher
from mldebug.launch.env import free_port, rank_env
from mldebug.launch.failures import (
    Failure,
    collect_failures,
    exit_code_of,
    raised_before,
    with_cores,
)
from mldebug.launch.guardian import GuardianLink
from mldebug.launch.manifest import Manifest
from mldebug.launch.output import LAUNCHER
from mldebug.launch.pipes import FULL_ERRNOS, Logs, PipeReader, Stream, make_pipe, pipe_size
from mldebug.launch.procs import end_groups
from mldebug.launch.spec import LaunchSpec
from mldebug.launch.wrapped import WrappedRanks


@dataclass
class Child:
    rank: int | None  # None: the wrapped launcher
    popen: subprocess.Popen
    returncode: int | None = None
    # The last time poll() found it running: it died after that. For a rank that leaves no
    # error file (a signal, os._exit) this is the time that orders it against the others,
    # since a peer's "connection closed" error can come before mldebug notices the death.
    last_alive: float = field(default_factory=time.time)
    stopped: bool = False  # ended by mldebug, not by itself
    stopped_at: float = 0.0  # when mldebug began to end it (time.time())


def first_failed(children: list[Child]) -> Child | None:
    """The child that failed first by itself (the one last seen alive earliest)."""
    ended = [c for c in children if c.returncode not in (None, 0) and not c.stopped]
    return min(ended, key=lambda c: c.last_alive) if ended else None


def poll_children(children: list[Child], ended: Callable[[Child], None]) -> None:
    """One look at each child still running: its last time alive, or `ended` once it is not."""
    for child in children:
        if child.returncode is None:
            now = time.time()
            if child.popen.poll() is not None:
                ended(child)
            elif not _dying(child.popen.pid):
                child.last_alive = now


def _dying(pid: int) -> bool:
    """Its main thread has exited while other threads still end (a rank with threads killed
    by a signal): peers may already see it gone, yet waitpid cannot reap it for a while."""
    fields = proc_stat(pid)
    return fields is not None and fields[0] in ("Z", "X")


def end_children(
    children: list[Child], grace: float, hurry: threading.Event, ended: Callable[[Child], None]
) -> None:
    """End our children's process groups (SIGTERM, `grace`, SIGKILL; at once once `hurry`
    is set) and wait for each; those still running are marked stopped by mldebug."""
    for child in children:
        if child.returncode is None and child.popen.poll() is None:
            child.stopped, child.stopped_at = True, time.time()
    end_groups(own_groups(children), grace, hurry)
    for child in children:
        child.popen.wait()
        if child.returncode is None:
            ended(child)


def job_failures(
    children: list[Child],
    paths: RunPaths,
    hosts: dict[int, str],
    vanished: dict[int, float],
    cores: CoreCatcher | None,
) -> tuple[list[Failure], list[int]]:
    """The ranks' failures in the order they failed (by their exit and last time alive,
    with the cores --core-dumps caught), and the ranks mldebug stopped, sorted."""
    stopped = sorted(c.rank for c in children if c.stopped and c.rank is not None)
    exits = {
        c.rank: (c.returncode, c.last_alive)
        for c in children
        if c.rank is not None and c.returncode is not None
    }
    failures = collect_failures(paths, exits, stopped=set(stopped), hosts=hosts, vanished=vanished)
    if cores is not None:
        failures = with_cores(failures, cores.found)
    return failures, stopped


def own_groups(children: list[Child]) -> list[int]:
    """The process groups our children lead or led (one outlives its leader while other
    members, say DataLoader workers, run). Once a reaped child's pid is taken by a new
    process, its group is long gone and that id may lead a stranger's group."""
    return [
        child.popen.pid
        for child in children
        if child.popen.returncode is None or proc_stat(child.popen.pid) is None
    ]


def make_rank_dir(path: Path, logs: Logs) -> None:
    """A rank's directory; a full disk only costs its files, not the rank."""
    try:
        make_private_dir(path)
    except UntrustedDirError:
        raise
    except OSError as error:
        if error.errno not in FULL_ERRNOS:
            raise
        logs.filesystem_full(error)


def start_child(
    spec: LaunchSpec,
    rank: int | None,
    env: dict[str, str],
    *,
    host: str,
    logs: Logs,
    reader: PipeReader,
    guardian: GuardianLink | None,
    preexec: Callable[[], None] | None,
) -> subprocess.Popen:
    """Start one child whose stdout and stderr are pipes `reader` copies into its logs (a
    wrapped launcher, rank None, gets one pipe for both, as its log is one file)."""
    if rank is None:
        paths = [(spec.paths.launcher_log, "stdout")]
        label, shown = "launcher", True
    else:
        paths = [(spec.paths.stdout(rank), "stdout"), (spec.paths.stderr(rank), "stderr")]
        label, shown = str(rank), spec.rank_filter.shows(rank, rank)
    size = pipe_size(2 * spec.nproc)
    pipes = [make_pipe(size) for _ in paths]
    write_fds = [write for _, write in pipes]
    try:
        popen = subprocess.Popen(
            spec.command,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=write_fds[0],
            stderr=write_fds[-1],
            start_new_session=True,
            preexec_fn=preexec,
        )
    except BaseException:
        for read, _ in pipes:
            os.close(read)
        raise
    finally:
        for fd in write_fds:
            os.close(fd)
    if guardian is not None:
        guardian.watch_group(popen.pid, proc_start_ticks(popen.pid))
    prefix = f"[{host}:{label}] ".encode() if spec.prefix else b""
    for (read, _), (path, stream) in zip(pipes, paths, strict=True):
        rank_id = LAUNCHER if rank is None else rank
        reader.add(Stream(read, logs.open(path), rank_id, stream, prefix, shown))
    return popen


def start_ranks(
    spec: LaunchSpec,
    base: dict[str, str],
    children: list[Child],
    *,
    start: Callable[[int | None, dict[str, str]], subprocess.Popen],
    manifest: Manifest,
    logs: Logs,
    host: str,
    undo: Callable[[], None],
) -> None:
    """Native mode: start `spec.nproc` ranks with torchrun's environment, each added to
    `children` and run.json as it starts; should one not start, `undo` ends those that did."""
    port = spec.master_port or free_port()
    if spec.nproc > 1 and "OMP_NUM_THREADS" not in base:
        base["OMP_NUM_THREADS"] = "1"  # as torchrun: N ranks must not each use every core
    run_id = spec.paths.root.name
    for rank in range(spec.nproc):
        make_rank_dir(spec.paths.rank_dir(rank), logs)
        env = {**base, **rank_env(rank, spec.nproc, spec.master_addr, port, run_id)}
        try:
            popen = start(rank, env)
        except OSError:
            undo()
            raise
        children.append(Child(rank, popen))
        manifest.set_rank(rank, local_rank=rank, host=host, pid=popen.pid)
    manifest.update(world_size=spec.nproc, master_port=port)


def record_end(
    child: Child, manifest: Manifest, reader: PipeReader, cores: CoreCatcher | None
) -> None:
    """`child` has ended (its Popen was polled or waited for): say so in run.json, with
    the core --core-dumps caught of a rank that died by itself."""
    child.returncode = child.popen.returncode
    if child.rank is None:
        manifest.update(launcher_exit_code=exit_code_of(child.returncode))
        return
    reader.rank_ended(child.rank)
    if child.stopped and not raised_before(manifest.paths, child.rank, child.stopped_at):
        status = STATUS_INTERRUPTED
    else:  # by itself, or stopped while it ended after its own exception: it failed
        status = STATUS_SUCCEEDED if child.returncode == 0 else STATUS_FAILED
    core = None
    if cores is not None and not child.stopped:
        core = cores.rank_ended(child.rank, child.popen.pid, child.returncode)
    extra = {"core": core} if core is not None else {}
    manifest.set_rank(child.rank, exit_code=exit_code_of(child.returncode), status=status, **extra)


def guard_wrapped(wrapped: WrappedRanks, guardian: GuardianLink, guarded: set[int]) -> None:
    """Hand the guardian the wrapped ranks it does not know yet (`guarded`: those it does)."""
    for watched in list(wrapped.watched.values()):
        if watched.pid in guarded or watched.ticks is None or watched.gone:
            continue
        if getattr(watched, "verified", True):
            guarded.add(watched.pid)
            guardian.watch_process(watched.pid, watched.ticks)
