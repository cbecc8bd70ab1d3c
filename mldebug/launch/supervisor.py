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
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field

from mldebug.collect.agentstate import read_state
from mldebug.launch import env as envs
from mldebug.launch import procs, wrapped
from mldebug.launch.coredumps import CoreCatcher
from mldebug.launch.failures import (
    collect_failures,
    describe_exit,
    exit_code_of,
    format_report,
    job_outcome,
    with_cores,
)
from mldebug.launch.guardian import GuardianLink
from mldebug.launch.manifest import Manifest
from mldebug.launch.output import LAUNCHER, Console, OutputTailer
from mldebug.launch.pipes import (
    FULL_ERRNOS,
    Logs,
    PipeReader,
    Stream,
    error_text,
    make_pipe,
    pipe_size,
)
from mldebug.launch.spec import LaunchSpec
from mldebug.launch.stragglers import StragglerWatch
from mldebug.launch.stragglers import enabled as stragglers_enabled
from mldebug.launch.timeouts import (
    Explanation,
    Timeout,
    explain,
    places_of,
    timeout_of,
)
from mldebug.launch.watchdog import HangWatchdog
from mldebug.rundir import (
    STATUS_FAILED,
    STATUS_INTERRUPTED,
    STATUS_SUCCEEDED,
    UntrustedDirError,
    hostname,
    make_private_dir,
    proc_start_ticks,
    proc_stat,
    read_json,
    read_tail,
)

POLL_INTERVAL = 0.1
HANG_EXIT_CODE = 124  # the job was stopped by --on-hang stop (as timeout(1) says)
# A rank died of a collective timeout: the stacks of the ranks still alive are read once
# before they are stopped (what they were doing instead of waiting), within this.
LAST_STACKS_DEADLINE = 5.0
STDERR_TAIL_BYTES = 64 << 10  # where NCCL's watchdog line is looked for
MAX_RANKS_EXPLAINED = 4096
MAX_FILES_SAID = 6  # incomplete logs named on the console; run.json has them all


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
        self.unshown: list[str] = []  # messages written while the console was off (TUI)
        self.logs = Logs(spec.paths.root, self._filesystem_full, self._log_failed)
        self.manifest = Manifest(spec.paths, spec, self.host)
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
        self.stragglers: StragglerWatch | None = None  # launch/stragglers.py
        self._last_places: dict = {}  # rank -> timeouts.Place, read as the first rank died
        self.cores = CoreCatcher(spec.paths.root) if spec.core_dumps else None  # --core-dumps
        error = self.manifest.error
        if error is not None and error.errno in FULL_ERRNOS:
            self.logs.filesystem_full(error)  # full from the start: say so before anything

    # -- public API --------------------------------------------------------------------

    def start(self) -> None:
        spec = self.spec
        self._start_guardian()
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
        if spec.hang_timeout:
            self.watchdog = HangWatchdog(
                self.paths,
                spec.hang_timeout,
                spec.on_hang,
                alive=self._job_alive,
                say=self._say,
                stop=self._stop_for_hang,
                record=lambda hangs: self.manifest.update(hangs=hangs),
            )
            self.watchdog.start()
        if stragglers_enabled(os.environ):
            self.stragglers = StragglerWatch(self.paths, self._say)
            self.stragglers.start()

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

    def _start_guardian(self) -> None:
        try:
            self._guardian = GuardianLink.start(self.paths.root, self.spec.grace_period)
        except OSError as error:
            self._say(
                f"mldebug: could not start the guardian ({error}): should mldebug run be "
                "killed with SIGKILL, processes of the job that ignore SIGTERM may run on"
            )

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

    def _prefix(self, label: str) -> bytes:
        return f"[{self.host}:{label}] ".encode() if self.spec.prefix else b""

    def _popen(self, rank: int | None, env: dict[str, str]) -> subprocess.Popen:
        """Start one child whose stdout and stderr are pipes read by self._reader (a wrapped
        launcher gets one pipe for both, as its log is one file)."""
        if rank is None:
            paths = [(self.paths.launcher_log, "stdout")]
            label, shown = "launcher", True
        else:
            paths = [(self.paths.stdout(rank), "stdout"), (self.paths.stderr(rank), "stderr")]
            label, shown = str(rank), self.spec.rank_filter.shows(rank, rank)
        size = pipe_size(2 * self.spec.nproc)
        pipes = [make_pipe(size) for _ in paths]
        write_fds = [write for _, write in pipes]
        try:
            popen = subprocess.Popen(
                self.spec.command,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=write_fds[0],
                stderr=write_fds[-1],
                start_new_session=True,
                preexec_fn=self._preexec(),
            )
        except BaseException:
            for read, _ in pipes:
                os.close(read)
            raise
        finally:
            for fd in write_fds:
                os.close(fd)
        if self._guardian is not None:
            self._guardian.watch_group(popen.pid, proc_start_ticks(popen.pid))
        for (read, _), (path, stream) in zip(pipes, paths, strict=True):
            log = self.logs.open(path)
            rank_id = LAUNCHER if rank is None else rank
            self._reader.add(Stream(read, log, rank_id, stream, self._prefix(label), shown))
        return popen

    def _preexec(self):
        preexec = procs.parent_death_signal()
        return self.cores.preexec(preexec) if self.cores is not None else preexec

    def _rank_dir(self, rank: int) -> None:
        """The rank's directory; a full disk only costs its files, not the rank."""
        try:
            make_private_dir(self.paths.rank_dir(rank))
        except UntrustedDirError:
            raise
        except OSError as error:
            if error.errno not in FULL_ERRNOS:
                raise
            self.logs.filesystem_full(error)

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
            self._rank_dir(rank)
            env = {**base, **envs.rank_env(rank, spec.nproc, spec.master_addr, port, run_id)}
            try:
                popen = self._popen(rank, env)
            except OSError:
                self._end_children(grace=0)
                raise
            self.children.append(_Child(rank, popen))
            self.manifest.set_rank(rank, local_rank=rank, host=self.host, pid=popen.pid)
        self.manifest.update(world_size=spec.nproc, master_port=port)

    def _start_launcher(self) -> None:
        popen = self._popen(None, self._base_env())
        self.children.append(_Child(None, popen))
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
        self._guard("stopping the job", lambda: self._end_children(self.spec.grace_period))
        self._guard("showing the last output", self._finish_output)
        self._guard("summing up the run", self._conclude)
        if self.exit_code is None:
            self.exit_code = self._plain_outcome()[0]
        self._guard("finishing", self._release_guardian)
        self._done.set()

    def _guard(self, what: str, step) -> None:
        try:
            step()
        except Exception as error:
            self._internal_error(what, error)

    def _internal_error(self, what: str, error: Exception) -> None:
        """A bug of mldebug's: one line (each kind once), the traceback with MLDEBUG_DEBUG=1."""
        text = str(error).strip().splitlines()
        line = (
            f"mldebug: internal error while {what} ({type(error).__name__}"
            + (f": {text[0][:300]}" if text else "")
            + "); the job's exit code is kept. This is a bug in mldebug: please report it."
        )
        if line in self._internal_errors:
            return
        self._internal_errors.add(line)
        if os.environ.get("MLDEBUG_DEBUG", "") not in ("", "0"):
            import traceback

            line += "\n" + "".join(traceback.format_exception(error)).rstrip()
        self._say(line)

    def _finish_output(self) -> None:
        with self._tailer_lock:
            self._finished_output = True
        self._reader.finish()
        if self._tailer is not None:
            self._tailer.finish()

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
                    next_discovery = time.monotonic() + 0.5
                    self._guard("reading the ranks' proc.json", self._discover)
                self._guard("watching the wrapped ranks", self.wrapped.poll)
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
                self._guard(
                    "reading the last stacks", lambda rank=failed.rank: self._read_last_places(rank)
                )
                return
            self._stop_requested.wait(POLL_INTERVAL)

    def _discover(self) -> None:
        self.wrapped.discover()
        if self._guardian is None:
            return
        for watched in list(self.wrapped.watched.values()):
            known = watched.pid in self._guarded or watched.ticks is None or watched.gone
            if not known and getattr(watched, "verified", True):
                self._guarded.add(watched.pid)
                self._guardian.watch_process(watched.pid, watched.ticks)

    def _first_failed(self) -> _Child | None:
        ended = [c for c in self.children if c.returncode not in (None, 0) and not c.stopped]
        return min(ended, key=lambda c: c.last_alive) if ended else None

    def _child_ended(self, child: _Child) -> None:
        child.returncode = child.popen.returncode
        if child.rank is None:
            self.manifest.update(launcher_exit_code=exit_code_of(child.returncode))
            return
        self._reader.rank_ended(child.rank)
        if child.stopped:
            status = STATUS_INTERRUPTED
        else:
            status = STATUS_SUCCEEDED if child.returncode == 0 else STATUS_FAILED
        core = None
        if self.cores is not None and not child.stopped:
            core = self.cores.rank_ended(child.rank, child.popen.pid, child.returncode)
        extra = {"core": core} if core is not None else {}
        self.manifest.set_rank(
            child.rank, exit_code=exit_code_of(child.returncode), status=status, **extra
        )

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
            self._guard("reading the ranks' proc.json", self._discover)
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

    def _plain_outcome(self) -> tuple[int, str]:
        """The exit code and status from what mldebug saw itself, no file read: what comes
        out when summing up the run fails."""
        if self._interrupted is not None and self._hang_stop:
            return HANG_EXIT_CODE, STATUS_FAILED
        if self._interrupted is not None:
            return 128 + (self._interrupted or signal.SIGINT), STATUS_INTERRUPTED
        if self.spec.mode == envs.MODE_WRAP:
            returncode = self.children[0].returncode if self.children else None
            code = exit_code_of(returncode) if returncode is not None else 1
            return code, STATUS_FAILED if code else STATUS_SUCCEEDED
        failed = self._first_failed()
        if failed is None:
            return 0, STATUS_SUCCEEDED
        return exit_code_of(failed.returncode), STATUS_FAILED

    def _conclude(self) -> None:
        """Exit code, final manifest, and the first-failure report."""
        self.exit_code, status = self._plain_outcome()  # the truth even if the rest fails
        try:
            state = self._log_state()
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
        if self.cores is not None:
            failures = with_cores(failures, self.cores.found)
        launcher = self.children[0].returncode if spec.mode == envs.MODE_WRAP else None
        code, status, failures = job_outcome(failures, self._interrupted, launcher)
        interrupted = status == STATUS_INTERRUPTED
        hang_stopped = interrupted and self._hang_stop
        if hang_stopped:  # not the user's Ctrl-C: the job failed, by hanging
            code, status, interrupted = HANG_EXIT_CODE, STATUS_FAILED, False
        self.exit_code = code
        explanation = None
        if failures and not interrupted and not hang_stopped:
            try:
                explanation = self._explain(failures)
            except Exception as error:  # the plain report still comes out
                self._internal_error("explaining a collective timeout", error)
        first = failures[0].to_json() if failures else None
        if first is not None and explanation is not None:
            cause = explanation.cause
            first["collective_timeout"] = True
            first["root_cause"] = cause.to_json() if cause is not None else None
            first["waits"] = list(explanation.waits)
        self.manifest.update(
            status=status, exit_code=code, end_time=time.time(), first_failure=first
        )
        if spec.mode == envs.MODE_WRAP:
            self.wrapped.settle({f.rank for f in failures}, code)
        if hang_stopped:
            report = self.watchdog.reports[-1] if self.watchdog and self.watchdog.reports else None
            where = f"; the hang report: {report.text_path}" if report and report.text_path else ""
            self._say(
                f"mldebug: job stopped: no progress for {spec.hang_timeout:g}s "
                f"(--on-hang stop){where}; exit code {code}"
            )
        elif failures and not interrupted:
            failed = {failure.rank for failure in failures}
            report = format_report(
                failures, self.paths, [r for r in stopped if r not in failed], explanation
            )
            note = self._incomplete_logs_note(failures[0].rank)
            if note:  # after the "full output" line it qualifies
                head, sep, tail = report.rpartition("\n  what to do next")
                report = head + note + sep + tail if sep else report + note
            self._say(report)
        elif spec.mode == envs.MODE_WRAP and code != 0 and not interrupted:
            self._say(
                f"mldebug: the launcher exited with code {code}; see {self.paths.launcher_log}"
            )
        if interrupted:
            self._say(f"mldebug: job stopped; its files are in {self.paths.root}")

    # -- a collective timeout ------------------------------------------------------------

    def _stderr_tail(self, rank: int) -> str:
        try:
            data, _ = read_tail(self.paths.stderr(rank), STDERR_TAIL_BYTES)
        except OSError:
            return ""
        return data.decode("utf-8", errors="replace")

    def _timeout(self, failure) -> Timeout | None:
        """The collective timeout `failure` is, if it is one (its error, else its stderr:
        NCCL's watchdog aborts the process without a Python exception)."""
        return timeout_of(failure.message) or timeout_of(self._stderr_tail(failure.rank))

    def _read_last_places(self, rank: int) -> None:
        """The first rank died of a collective timeout: read once where the ranks still
        alive stand (before they are stopped), for the report to say what they did instead
        of waiting with it."""
        data = read_json(self.paths.error_file(rank)) or {}
        message = data.get("message") if isinstance(data.get("message"), str) else ""
        if timeout_of(message) is None and timeout_of(self._stderr_tail(rank)) is None:
            return
        if not any(c.returncode is None and c.rank not in (None, rank) for c in self.children):
            return
        from mldebug.observe import observe_once
        from mldebug.targets import resolve_targets

        try:
            snapshot, _ = observe_once(
                resolve_targets(run_dir=self.paths.root), samples=1, deadline=LAST_STACKS_DEADLINE
            )
        except Exception:  # they ended meanwhile, or cannot be read: the states still tell
            return
        self._last_places = places_of(snapshot)

    def _explain(self, failures: list) -> Explanation | None:
        """What the ranks waited in and who caused it, when the first failure is a
        collective timeout; None otherwise."""
        if self._timeout(failures[0]) is None:
            return None
        ranks = sorted(
            set(self.paths.rank_ids()) | {c.rank for c in self.children if c.rank is not None}
        )[:MAX_RANKS_EXPLAINED]
        places = dict(self._last_places)
        if self.watchdog is not None and self.watchdog.hang_snapshot is not None:
            for rank, place in places_of(self.watchdog.hang_snapshot).items():
                places.setdefault(rank, place)
        states = {rank: read_state(self.paths.root, rank) for rank in ranks}
        died = {failure.rank: failure.time for failure in failures}
        raised = {f.rank: f.user_location or f.location for f in failures}
        timeouts = {}
        for failure in failures:
            timeout = self._timeout(failure)
            if timeout is not None:
                timeouts[failure.rank] = timeout
        return explain(states, places, died, timeouts, raised)

    # -- a full disk -------------------------------------------------------------------

    def _log_state(self) -> dict | None:
        """For run.json: why logs stopped, where each ends (stopped_at) and which miss
        output from which byte (missing_from). In wrap mode the ranks' hooks write their own
        logs, which end where they are when the disk is full."""
        stopped = self.logs.stopped()
        if not stopped and self.logs.full is None:
            return None
        if self.logs.full is not None and self.spec.mode == envs.MODE_WRAP:
            for rank in self.paths.rank_ids():
                for path in (self.paths.stdout(rank), self.paths.stderr(rank)):
                    try:
                        size = os.lstat(path).st_size
                    except OSError:
                        continue
                    stopped.setdefault(str(path.relative_to(self.paths.root)), size)
        errors = [self.logs.full] + [f.error for f in self.logs.files]
        reason = next(error for error in errors if error is not None)
        return {
            "reason": error_text(reason),
            "time": time.time(),
            "stopped_at": stopped,
            "missing_from": self.logs.incomplete(),
        }

    def _filesystem_full(self, error: OSError) -> None:
        """Said once, as soon as a write finds the run directory's filesystem full."""
        state = self._log_state() or {"stopped_at": {}}
        self.manifest.update(logs_incomplete=state)
        ends = list(state["stopped_at"].items())
        listed = ", ".join(f"{name} at byte {offset}" for name, offset in ends[:MAX_FILES_SAID])
        if len(ends) > MAX_FILES_SAID:
            listed += f" ... ({len(ends) - MAX_FILES_SAID} more in {self.paths.manifest})"
        where = (
            "here"
            if self.spec.mode == envs.MODE_NATIVE
            else "here (as [launcher] lines once a rank's own log cannot be written)"
        )
        self._say(
            f"mldebug: the run directory's filesystem is full ({error_text(error)}): "
            f"{self.paths.root}\n  the job goes on and its output still shows {where}; "
            + (f"the logs end where they are now: {listed}" if listed else "no log can be written")
        )

    def _log_failed(self, log) -> None:
        self.manifest.update(logs_incomplete=self._log_state())
        self._say(
            f"mldebug: cannot write {log.path} ({error_text(log.error)}); mldebug writes no "
            f"more to it after byte {log.size}; the output still shows here"
        )

    def _incomplete_logs_note(self, rank: int) -> str:
        """For the report: from which byte the failed rank's logs miss its output."""
        state = self.manifest.data.get("logs_incomplete") or {}
        key = "missing_from" if self.spec.mode == envs.MODE_NATIVE else "stopped_at"
        mine = [
            f"{name.rsplit('/', 1)[-1]} from byte {offset}"
            for name, offset in (state.get(key) or {}).items()
            if name.startswith(f"ranks/{rank}/")
        ]
        if not mine:
            return ""
        return f"\n  its logs are incomplete ({state.get('reason')}): {', '.join(mine)}"

    def _say(self, text: str) -> None:
        if self.spec.console is not None:
            self.spec.console.message(text)
        else:
            self.unshown.append(text)
