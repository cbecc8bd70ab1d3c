"""Start a job's processes, watch them, stop them: the core of `mldebug run`.

    handle = Supervisor(spec)
    handle.start()          # processes run, output is tailed (unless spec.console is None)
    code = handle.wait()    # the job's exit code, after the first-failure report
    handle.stop()           # from any thread or a signal handler: end the job now

Native mode starts `nproc` ranks itself; wrap mode starts one launcher command (torchrun,
accelerate, srun...) and learns about its ranks from the files their hooks write. Every
child starts in a session of its own and is ended by process group (SIGTERM, a grace
period, SIGKILL), so DataLoader workers and other grandchildren go with it. Should mldebug
itself be killed outright, the kernel sends each child SIGTERM, and the guardian (a small
process of its own, guardian.py) ends what is left of the job and marks run.json.

The children write their output into pipes that one thread here reads into the log files
and onto the console (pipes.py): a full disk never reaches them. Whatever goes wrong in
summing up the run, the job's exit code comes out of wait() and run.json gets a final
status; the failure is said in one line.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable

from mldebug.files.rundir import hostname
from mldebug.launch import env as envs
from mldebug.launch import procs, wrapped
from mldebug.launch.changes import ChangeWatch
from mldebug.launch.changes import enabled as changes_enabled
from mldebug.launch.children import (
    Child,
    end_children,
    first_failed,
    guard_wrapped,
    job_failures,
    poll_children,
    record_end,
    start_child,
    start_ranks,
)
from mldebug.launch.coredumps import CoreCatcher
from mldebug.launch.failures import describe_exit
from mldebug.launch.guardian import GuardianLink, start_guardian
from mldebug.launch.lastwaits import LastWaits
from mldebug.launch.logbook import LogBook
from mldebug.launch.manifest import Manifest
from mldebug.launch.outcome import (
    HANG_EXIT_CODE,
    conclude,
    internal_error_line,
    internal_error_traceback,
    plain_outcome,
    wants_explanation,
)
from mldebug.launch.output import Console, OutputTailer
from mldebug.launch.pipes import FULL_ERRNOS, PipeReader
from mldebug.launch.spec import LaunchSpec
from mldebug.launch.stragglers import SharedViews, StragglerWatch
from mldebug.launch.stragglers import enabled as stragglers_enabled
from mldebug.launch.watchdog import HangWatchdog

__all__ = ["HANG_EXIT_CODE", "Supervisor"]

POLL_INTERVAL = 0.1


class Supervisor:
    def __init__(self, spec: LaunchSpec) -> None:
        self.spec = spec
        self.paths = spec.paths
        self.host = hostname()
        self.children: list[Child] = []
        self.unshown: list[str] = []  # messages written while the console was off (TUI)
        self.manifest = Manifest(spec.paths, spec, self.host)
        self.logbook = LogBook(spec.paths, self.manifest, spec.mode == envs.MODE_NATIVE, self._say)
        self.logs = self.logbook.logs
        self.manifest.on_full = self.logs.filesystem_full
        self.exit_code: int | None = None
        self._stop_reason: int | None = None  # signal number, or 0 for stop() without one
        self._interrupted: int | None = None  # _stop_reason, if it came while ranks ran
        self._stop_requested = threading.Event()
        self._hurry = threading.Event()
        self._monitor = threading.Thread(target=self._watch, name="mldebug-supervisor")
        self._reader = PipeReader(spec.console, on_crash=self._say)
        self._tailer: OutputTailer | None = None  # wrap mode: the ranks' own log files
        self._tailer_lock = threading.Lock()
        self._finished_output = False
        self._done = threading.Event()
        self._guardian: GuardianLink | None = None
        self._guarded: set[int] = set()  # wrapped rank pids the guardian knows
        self._internal_errors: set[str] = set()
        self.wrapped = wrapped.WrappedRanks(spec.paths, self.manifest)
        self.watchdog: HangWatchdog | None = None
        self._hang_stop = False  # the watchdog stopped the job (--on-hang stop)
        self.last_waits = LastWaits(spec.paths)  # a collective timeout's explanation
        self.stragglers: StragglerWatch | None = None  # launch/stragglers.py
        self.changes: ChangeWatch | None = None  # launch/changes.py: slower over the run
        self.cores = CoreCatcher(spec.paths.root) if spec.core_dumps else None  # --core-dumps
        error = self.manifest.error
        if error is not None and error.errno in FULL_ERRNOS:
            self.logs.filesystem_full(error)  # full from the start: say so before anything

    # -- public API --------------------------------------------------------------------

    def start(self) -> None:
        spec = self.spec
        self._guardian = start_guardian(self.paths.root, self.spec.grace_period, self._say)
        if self.cores is not None:
            self.manifest.update(core_dumps=self.cores.summary())
            note = self.cores.start_note()
            if note:
                self._say(note)
        try:
            if spec.mode == envs.MODE_NATIVE:
                self._start_ranks()
            else:
                self._start_launcher()
        except BaseException:
            self._reader.finish()
            self._release_guardian()
            self.manifest.close()
            raise
        self._reader.start()
        if spec.console is not None and spec.mode == envs.MODE_WRAP:
            self._start_tailer(spec.console, from_end=False)
        self._monitor.start()
        if spec.hang_timeout and spec.render is not None:
            self.watchdog = HangWatchdog(
                self.paths,
                spec.hang_timeout,
                spec.on_hang,
                render=spec.render,
                alive=self._job_alive,
                say=self._say,
                stop=self._stop_for_hang,
                record=lambda hangs: self.manifest.update(hangs=hangs),
            )
            self.watchdog.start()
        shared = SharedViews(self.paths)  # one reading of the states for both checks
        if stragglers_enabled(os.environ):
            self.stragglers = StragglerWatch(self.paths, self._say, shared=shared)
            self.stragglers.start()
        if changes_enabled(os.environ):
            self.changes = ChangeWatch(self.paths, self._say, shared=shared)
            self.changes.start()

    def show_output(self, console: Console) -> None:
        """Turn console output on for a job started without it (output from now on)."""
        with self._tailer_lock:
            if self.spec.console is None and not self._finished_output:
                self.spec.console = console
                self._reader.show(console)
                if self.spec.mode == envs.MODE_WRAP:
                    self._start_tailer(console, from_end=True)

    def _job_alive(self) -> bool:
        return not self._stop_requested.is_set() and any(
            child.returncode is None for child in self.children
        )

    def _stop_for_hang(self) -> None:
        if not self._stop_requested.is_set():
            self._hang_stop = True
        self.stop()

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

    def _release_guardian(self) -> None:
        """The job is over and accounted for: the guardian has nothing left to do."""
        if self._guardian is not None:
            self._guardian.done()
            self._guardian = None

    def _start_tailer(self, console: Console, from_end: bool) -> None:
        """Wrap mode: the ranks' hooks write their log files; show them as they grow."""
        self._tailer = OutputTailer(
            self.paths,
            console,
            self.host,
            rank_filter=self.spec.rank_filter,
            prefix=self.spec.prefix,
            from_end=from_end,
        )
        self._tailer.start()

    def _start_child(self, rank: int | None, env: dict[str, str]) -> subprocess.Popen:
        preexec = procs.parent_death_signal()
        if self.cores is not None:
            preexec = self.cores.preexec(preexec)
        return start_child(
            self.spec,
            rank,
            env,
            host=self.host,
            logs=self.logs,
            reader=self._reader,
            guardian=self._guardian,
            preexec=preexec,
        )

    def _base_env(self) -> dict[str, str]:
        base = dict(os.environ if self.spec.env is None else self.spec.env)
        return envs.job_env(base, self.paths.root, self.spec.mode, self.spec.options)

    def _start_ranks(self) -> None:
        start_ranks(
            self.spec,
            self._base_env(),
            self.children,
            start=self._start_child,
            manifest=self.manifest,
            logs=self.logs,
            host=self.host,
            undo=lambda: self._end_children(grace=0),
        )

    def _start_launcher(self) -> None:
        popen = self._start_child(None, self._base_env())
        self.children.append(Child(None, popen))
        self.manifest.update(launcher_pid=popen.pid)

    # -- watching ----------------------------------------------------------------------

    def _watch(self) -> None:
        # Each step runs whatever failed before it: the job must end, its output be shown,
        # and its exit code come out.
        self._guard("watching the job", self._watch_until_over)
        if self.watchdog is not None:
            self._guard("ending the hang watchdog", self.watchdog.close)
        if self.stragglers is not None:
            self.stragglers.close()
        if self.changes is not None:
            self.changes.close()
        self._guard("stopping the job", lambda: self._end_children(self.spec.grace_period))
        self._guard("showing the last output", self._finish_output)
        self._guard("summing up the run", self._conclude)
        if self.exit_code is None:
            self.exit_code = self._plain_outcome()[0]
        self._guard("finishing", self._release_guardian)
        self._done.set()

    def _guard(self, what: str, step: Callable[[], object]) -> None:
        try:
            step()
        except Exception as error:
            self._internal_error(what, error)

    def _internal_error(self, what: str, error: Exception) -> None:
        """A bug of mldebug's: one line (each kind once), the traceback with MLDEBUG_DEBUG=1."""
        line = internal_error_line(what, error)
        if line not in self._internal_errors:
            self._internal_errors.add(line)
            self._say(line + internal_error_traceback(error))

    def _finish_output(self) -> None:
        with self._tailer_lock:
            self._finished_output = True
        self._reader.finish()
        if self._tailer is not None:
            self._tailer.finish()

    def _watch_until_over(self) -> None:
        next_discovery = 0.0
        while True:
            poll_children(self.children, self._child_ended)
            if self.spec.mode == envs.MODE_WRAP:
                if time.monotonic() >= next_discovery:
                    next_discovery = time.monotonic() + 0.5
                    self._guard("reading the ranks' proc.json", self._discover)
                self._guard("watching the wrapped ranks", self.wrapped.poll)
            if all(child.returncode is not None for child in self.children):
                return
            if self._stop_requested.is_set():
                self._interrupted = self._stop_reason
                return
            failed = first_failed(self.children) if self.spec.mode == envs.MODE_NATIVE else None
            if failed is not None:
                self._say(
                    f"mldebug: rank {failed.rank} {describe_exit(failed.returncode or 0)}; "
                    f"stopping the other ranks (grace period {self.spec.grace_period:g}s)"
                )
                self._guard(  # mypy infers no type for a lambda with a default (bound now)
                    "reading the last stacks",
                    lambda rank=failed.rank: self._read_last_places(rank),  # type: ignore[misc]
                )
                return
            self._stop_requested.wait(POLL_INTERVAL)

    def _discover(self) -> None:
        self.wrapped.discover()
        if self._guardian is not None:
            guard_wrapped(self.wrapped, self._guardian, self._guarded)

    def _child_ended(self, child: Child) -> None:
        record_end(child, self.manifest, self._reader, self.cores)

    # -- ending ------------------------------------------------------------------------

    def _end_children(self, grace: float) -> None:
        """End whatever still runs: our children's process groups, then wrapped ranks."""
        end_children(self.children, grace, self._hurry, self._child_ended)
        if self.spec.mode == envs.MODE_WRAP:
            self._guard("reading the ranks' proc.json", self._discover)
            self.wrapped.end_left_over(grace, self._hurry, self._say)

    def _plain_outcome(self) -> tuple[int, str]:
        failed = first_failed(self.children)
        return plain_outcome(
            interrupted=self._interrupted,
            hang_stop=self._hang_stop,
            launcher_returncode=self.children[0].returncode if self.children else None,
            wrap=self.spec.mode == envs.MODE_WRAP,
            first_failed_returncode=failed.returncode if failed is not None else None,
        )

    def _conclude(self) -> None:
        """Exit code, final manifest, and the first-failure report."""
        self.exit_code, status = self._plain_outcome()  # the truth even if the rest fails
        try:
            state = self.logbook.state()
            if state is not None:
                self.manifest.update(logs_incomplete=state)
            self._sum_up()
        except Exception:
            self.manifest.update(status=status, exit_code=self.exit_code, end_time=time.time())
            raise
        finally:
            if self.manifest.error is not None:
                self._say(
                    f"mldebug: could not keep {self.paths.manifest} up to date: "
                    f"{self.manifest.error}"
                )
            self.manifest.close()

    def _sum_up(self) -> None:
        spec = self.spec
        wrap = spec.mode == envs.MODE_WRAP
        failures, stopped = job_failures(
            self.children, self.paths, self.manifest.hosts(), self.wrapped.gone(), self.cores
        )
        launcher = self.children[0].returncode if wrap else None
        explanation = None
        if wants_explanation(failures, self._interrupted, launcher):
            try:
                ranks = {c.rank for c in self.children if c.rank is not None}
                hang = self.watchdog.hang_snapshot if self.watchdog is not None else None
                explanation = self.last_waits.explain(failures, ranks, hang)
            except Exception as error:  # the plain report still comes out
                self._internal_error("explaining a collective timeout", error)
        reports = self.watchdog.reports if self.watchdog is not None else []
        outcome = conclude(
            failures,
            paths=self.paths,
            interrupted=self._interrupted,
            hang_stop=self._hang_stop,
            launcher_returncode=launcher,
            stopped=stopped,
            explanation=explanation,
            logs_incomplete=self.manifest.data.get("logs_incomplete"),
            wrap=wrap,
            hang_timeout=spec.hang_timeout or 0.0,
            hang_report=reports[-1].text_path if reports else None,
        )
        self.exit_code = outcome.exit_code
        self.manifest.update(
            status=outcome.status,
            exit_code=outcome.exit_code,
            end_time=time.time(),
            first_failure=outcome.first_failure,
        )
        if wrap:
            self.wrapped.settle({f.rank for f in outcome.failures}, outcome.exit_code)
        for message in outcome.messages:
            self._say(message)

    def _read_last_places(self, rank: int) -> None:
        alive = any(c.returncode is None and c.rank not in (None, rank) for c in self.children)
        self.last_waits.read_places(rank, others_alive=alive)

    def _say(self, text: str) -> None:
        if self.spec.console is not None:
            self.spec.console.message(text)
        else:
            self.unshown.append(text)
