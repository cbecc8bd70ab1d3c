"""Start a job's processes, watch them, stop them: the core of `mldebug run`.

    handle = Supervisor(spec)
    handle.start()          # processes run, output is tailed (unless spec.console is None)
    code = handle.wait()    # the job's exit code, after the first-failure report
    handle.stop()           # from any thread or a signal handler: end the job now

Native mode starts `nproc` ranks itself; wrap mode starts one launcher command (torchrun,
accelerate, srun...) and learns about its ranks from the files their hooks write. Every
child starts in a session of its own and is ended by process group (SIGTERM, a grace
period, SIGKILL), so DataLoader workers and other grandchildren go with it. Should mldebug
itself be killed outright, the kernel sends each child SIGTERM.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from dataclasses import dataclass, field

from mldebug.launch import env as envs
from mldebug.launch import procs, wrapped
from mldebug.launch.failures import (
    collect_failures,
    describe_exit,
    exit_code_of,
    format_report,
    job_outcome,
)
from mldebug.launch.manifest import Manifest
from mldebug.launch.output import Console, OutputTailer, RankFilter
from mldebug.rundir import (
    STATUS_FAILED,
    STATUS_INTERRUPTED,
    STATUS_SUCCEEDED,
    RunPaths,
    hostname,
    make_private_dir,
    open_append,
    proc_stat,
)

POLL_INTERVAL = 0.1


@dataclass
class LaunchSpec:
    paths: RunPaths
    command: list[str]  # native: the rank's argv (python script args); wrap: the launcher
    mode: str = envs.MODE_NATIVE
    nproc: int = 1
    master_addr: str = "127.0.0.1"
    master_port: int | None = None  # None: a free one
    options: envs.DebugOptions = field(default_factory=envs.DebugOptions)
    grace_period: float = 5.0
    console: Console | None = None  # None: output only to files (the TUI shows it)
    rank_filter: RankFilter = field(default_factory=RankFilter)
    prefix: bool = True
    argv: list[str] = field(default_factory=list)  # the mldebug command line, for run.json


@dataclass
class _Child:
    rank: int | None  # None: the wrapped launcher
    popen: subprocess.Popen
    returncode: int | None = None
    # The last time poll() found it running: it died after that. For a rank that leaves no
    # error file (a signal, os._exit) this is the time that orders it against the others,
    # since a peer's "connection closed" error can come before mldebug notices the death.
    last_alive: float = field(default_factory=time.time)
    stopped: bool = False  # ended by mldebug, not by itself


class Supervisor:
    def __init__(self, spec: LaunchSpec):
        self.spec = spec
        self.paths = spec.paths
        self.host = hostname()
        self.children: list[_Child] = []
        self.manifest = Manifest(spec.paths, spec, self.host)
        self.exit_code: int | None = None
        self._stop_reason: int | None = None  # signal number, or 0 for stop() without one
        self._interrupted: int | None = None  # _stop_reason, if it came while ranks ran
        self.unshown: list[str] = []  # messages written while the console was off (TUI)
        self._stop_requested = threading.Event()
        self._hurry = threading.Event()
        self._monitor = threading.Thread(target=self._watch, name="mldebug-supervisor")
        self._tailer: OutputTailer | None = None
        self._tailer_lock = threading.Lock()
        self._finished_output = False
        self._done = threading.Event()
        self.wrapped = wrapped.WrappedRanks(spec.paths, self.manifest)

    # -- public API --------------------------------------------------------------------

    def start(self) -> None:
        spec = self.spec
        if spec.mode == envs.MODE_NATIVE:
            self._start_ranks()
        else:
            self._start_launcher()
        if spec.console is not None:
            self._start_tailer(spec.console, from_end=False)
        self._monitor.start()

    def show_output(self, console: Console) -> None:
        """Turn console output on for a job started without it (output from now on)."""
        with self._tailer_lock:
            if self._tailer is None and not self._finished_output:
                self.spec.console = console
                self._start_tailer(console, from_end=True)

    @property
    def stopping(self) -> bool:
        return self._stop_requested.is_set()

    def stop(self, signum: int = 0) -> None:
        """Ask the job to end (safe from a signal handler or another thread).

        Asked a second time by a signal (Ctrl-C twice), it skips the grace period.
        """
        if self._stop_requested.is_set() and signum:
            self._hurry.set()
        if self._stop_reason is None:
            self._stop_reason = signum
        self._stop_requested.set()

    def wait(self, timeout: float | None = None) -> int | None:
        """The job's exit code once it is over (None if `timeout` passed first)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        # Short joins keep the main thread responsive to signals.
        while self._monitor.is_alive():
            if deadline is not None and time.monotonic() >= deadline:
                return None
            self._monitor.join(0.2)
        return self.exit_code

    @property
    def done(self) -> bool:
        return self._done.is_set()

    # -- starting ----------------------------------------------------------------------

    def _start_tailer(self, console: Console, from_end: bool) -> None:
        spec = self.spec
        native = spec.mode == envs.MODE_NATIVE
        self._tailer = OutputTailer(
            self.paths,
            console,
            self.host,
            rank_filter=spec.rank_filter,
            prefix=spec.prefix,
            launcher=not native,
            local_ranks={rank: rank for rank in range(spec.nproc)} if native else None,
            from_end=from_end,
        )
        self._tailer.start()

    def _base_env(self) -> dict[str, str]:
        return envs.job_env(dict(os.environ), self.paths.root, self.spec.mode, self.spec.options)

    def _start_ranks(self) -> None:
        spec = self.spec
        port = spec.master_port or envs.free_port()
        base = self._base_env()
        if spec.nproc > 1 and "OMP_NUM_THREADS" not in base:
            base["OMP_NUM_THREADS"] = "1"  # as torchrun: N ranks must not each use every core
        run_id = self.paths.root.name
        for rank in range(spec.nproc):
            make_private_dir(self.paths.rank_dir(rank))
            env = {**base, **envs.rank_env(rank, spec.nproc, spec.master_addr, port, run_id)}
            out = open_append(self.paths.stdout(rank))
            err = open_append(self.paths.stderr(rank))
            try:
                popen = subprocess.Popen(
                    spec.command,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=err,
                    start_new_session=True,
                    preexec_fn=procs.parent_death_signal(),
                )
            except OSError:
                self._end_children(grace=0)
                raise
            finally:
                os.close(out)
                os.close(err)
            self.children.append(_Child(rank, popen))
            self.manifest.set_rank(rank, local_rank=rank, host=self.host, pid=popen.pid)
        self.manifest.update(world_size=spec.nproc, master_port=port)

    def _start_launcher(self) -> None:
        log = open_append(self.paths.launcher_log)
        try:
            popen = subprocess.Popen(
                self.spec.command,
                env=self._base_env(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                preexec_fn=procs.parent_death_signal(),
            )
        finally:
            os.close(log)
        self.children.append(_Child(None, popen))
        self.manifest.update(launcher_pid=popen.pid)

    # -- watching ----------------------------------------------------------------------

    def _watch(self) -> None:
        try:
            self._watch_until_over()
        finally:
            self._end_children(grace=self.spec.grace_period)
            with self._tailer_lock:
                self._finished_output = True
                if self._tailer is not None:
                    self._tailer.finish()
            self._conclude()
            self._done.set()

    def _watch_until_over(self) -> None:
        next_discovery = 0.0
        while True:
            for child in self.children:
                if child.returncode is None:
                    now = time.time()
                    if child.popen.poll() is None:
                        child.last_alive = now
                    else:
                        self._child_ended(child)
            if self.spec.mode == envs.MODE_WRAP:
                if time.monotonic() >= next_discovery:
                    self.wrapped.discover()
                    next_discovery = time.monotonic() + 0.5
                self.wrapped.poll()
            if all(child.returncode is not None for child in self.children):
                return
            if self._stop_requested.is_set():
                self._interrupted = self._stop_reason
                return
            failed = self._first_failed() if self.spec.mode == envs.MODE_NATIVE else None
            if failed is not None:
                self._say(
                    f"mldebug: rank {failed.rank} {describe_exit(failed.returncode)}; "
                    f"stopping the other ranks (grace period {self.spec.grace_period:g}s)"
                )
                return
            self._stop_requested.wait(POLL_INTERVAL)

    def _first_failed(self) -> _Child | None:
        ended = [c for c in self.children if c.returncode not in (None, 0) and not c.stopped]
        return min(ended, key=lambda c: c.last_alive) if ended else None

    def _child_ended(self, child: _Child) -> None:
        child.returncode = child.popen.returncode
        if child.rank is None:
            self.manifest.update(launcher_exit_code=exit_code_of(child.returncode))
            return
        if self._tailer is not None:
            self._tailer.rank_ended(child.rank)
        if child.stopped:
            status = STATUS_INTERRUPTED
        else:
            status = STATUS_SUCCEEDED if child.returncode == 0 else STATUS_FAILED
        self.manifest.set_rank(child.rank, exit_code=exit_code_of(child.returncode), status=status)

    # -- ending ------------------------------------------------------------------------

    def _end_children(self, grace: float) -> None:
        """End whatever still runs: our children's process groups, then wrapped ranks."""
        for child in self.children:
            if child.returncode is None and child.popen.poll() is None:
                child.stopped = True
        procs.end_groups(self._own_groups(), grace, self._hurry)
        for child in self.children:
            child.popen.wait()
            if child.returncode is None:
                self._child_ended(child)
        if self.spec.mode == envs.MODE_WRAP:
            self.wrapped.discover()
            self.wrapped.end_left_over(grace, self._hurry, self._say)

    def _own_groups(self) -> list[int]:
        """The process groups our children lead or led (one outlives its leader while other
        members, say DataLoader workers, run). Once a reaped child's pid is taken by a new
        process, its group is long gone and that id may lead a stranger's group."""
        return [
            child.popen.pid
            for child in self.children
            if child.popen.returncode is None or proc_stat(child.popen.pid) is None
        ]

    def _conclude(self) -> None:
        """Exit code, final manifest, and the first-failure report."""
        spec = self.spec
        stopped = sorted(c.rank for c in self.children if c.stopped and c.rank is not None)
        exits = {
            c.rank: (c.returncode, c.last_alive)
            for c in self.children
            if c.rank is not None and c.returncode is not None
        }
        failures = collect_failures(
            self.paths,
            exits,
            stopped=set(stopped),
            hosts=self.manifest.hosts(),
            vanished=self.wrapped.gone(),
        )
        launcher = self.children[0].returncode if spec.mode == envs.MODE_WRAP else None
        code, status, failures = job_outcome(failures, self._interrupted, launcher)
        interrupted = status == STATUS_INTERRUPTED
        self.exit_code = code
        self.manifest.update(
            status=status,
            exit_code=code,
            end_time=time.time(),
            first_failure=failures[0].to_json() if failures else None,
        )
        if spec.mode == envs.MODE_WRAP:
            self.wrapped.settle({f.rank for f in failures}, code)
        if failures and not interrupted:
            failed = {failure.rank for failure in failures}
            self._say(format_report(failures, self.paths, [r for r in stopped if r not in failed]))
        elif spec.mode == envs.MODE_WRAP and code != 0 and not interrupted:
            self._say(
                f"mldebug: the launcher exited with code {code}; see {self.paths.launcher_log}"
            )
        if interrupted:
            self._say(f"mldebug: job stopped; its files are in {self.paths.root}")
        if self.manifest.error is not None:
            self._say(
                f"mldebug: could not keep {self.paths.manifest} up to date: {self.manifest.error}"
            )

    def _say(self, text: str) -> None:
        if self.spec.console is not None:
            self.spec.console.message(text)
        else:
            self.unshown.append(text)
