"""The in-rank side of mldebug, started by the hook in every process of a job.

Only the first process of a process tree that carries rank environment becomes the rank's
agent; DataLoader workers and other subprocesses inherit a marker and leave things alone.
The agent:
  * writes ranks/<rank>/proc.json (who and where this rank is: `dump` finds pids by it);
  * in wrap mode, points fds 1 and 2 at the rank's log files (native mode: the rank's
    stdout and stderr are pipes that `mldebug run` reads into the logs itself);
  * makes sys.stdout line-buffered so output shows up as it is printed;
  * enables faulthandler into ranks/<rank>/faulthandler.log, so a segfault leaves stacks;
  * starts a thread that sends every thread's stack to `dump` when it connects to the
    process's abstract socket (agent/stackthread.py), and registers a free real-time signal
    with faulthandler, which writes them to ranks/<rank>/stacks.txt, for when that thread
    cannot run (agent/stacksignal.py): stacks where ptrace is refused;
  * installs an excepthook that writes ranks/<rank>/error.json, then calls the previous one;
  * writes ranks/<rank>/exit.json when Python shuts down normally (not after a signal);
  * starts its watching parts (`_start_parts`): the collective trace, the step count, the
    memory readings and the heartbeat thread that writes ranks/<rank>/state.json, with
    what they notice in ranks/<rank>/events.jsonl (docs/agent.md). torch is never
    imported here: the parts that need it wait for the program to import it.

A full disk must never end the program. Every file the agent writes is written in a
try: one that cannot be written is left out (without proc.json, a wrapped rank's output
is not redirected, so it stays where the launcher sent it). In wrap mode the rank's fds 1
and 2 are its log files, and a write to a full disk fails in the program itself: there,
sys.stdout and sys.stderr are replaced by streams whose lowest layer (`_LogWriter`) takes
ENOSPC, EDQUOT, EFBIG or EIO from the log as the sign to put fds 1 and 2 back where the
launcher pointed them (kept aside at the start) and write there: the output flows on, to
mldebug through the launcher's own output (shown as [host:launcher] lines), and the log is
complete up to the byte it stopped at. Why not a pipe and a helper process per rank, as in
native mode: the helper would be one more process in each rank's tree (seen as a worker
by dump, killed along with the rank's group, taking the rank down with SIGPIPE if it goes
first); why not a thread in the rank: what the thread has not read yet is lost when the
rank crashes. What this does not cover: a write made below Python (os.write(1, ...), C
code) before any Python write has hit the full disk gets the error itself (C's stdio
ignores it, os.write raises it), and so do processes the rank started before the switch
(a forked DataLoader worker switches by itself, having the same streams).

Stdlib only; it talks to the world through files in the run directory. This module is
loaded by path (as `_mldebug_agent`), so siblings are imported relatively or by path too.
"""

from __future__ import annotations

import atexit
import errno
import io
import os
import sys
import threading
import time
from pathlib import Path

from .errors import install_excepthook
from .identity import ENV_OWNER, claim_rank, is_launcher
from .siblings import sibling as _sibling

TYPE_CHECKING = False  # typing is not imported in ranks; mypy reads this block
if TYPE_CHECKING:
    from collections.abc import Callable
    from types import ModuleType
    from typing import Any, TextIO

    from ..files.rundir import RunPaths

    WriteJson = Callable[[Path, dict], object]

ENV_RUN_DIR = "MLDEBUG_RUN_DIR"
ENV_MODE = "MLDEBUG_MODE"
MODE_WRAP = "wrap"

_fault_file: TextIO | None = None  # stays open for faulthandler for the life of the process
_stacks_file: TextIO | None = None  # where faulthandler writes stacks on the agent signal
_runtime: _Runtime | None = None  # the running parts, once activate() started them


# A write to the log that fails with one of these sends the output back to the launcher.
LOG_WRITE_ERRORS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO})


class _Fallback:
    """fds 1 and 2 as the launcher gave them, kept aside, and the switch back to them."""

    def __init__(self, saved: dict[int, int]) -> None:
        self.saved = saved
        self.offsets: dict[int, int] | None = None  # fd -> bytes its log holds

    def fall_back(self) -> None:
        if self.offsets is not None:
            return
        self.offsets = {}
        for fd, saved in self.saved.items():
            try:
                self.offsets[fd] = os.fstat(fd).st_size
                os.dup2(saved, fd)
            except OSError:
                pass


class _LogWriter(io.RawIOBase):
    """The raw layer of sys.stdout or sys.stderr over fd 1 or 2 while that is a log file."""

    def __init__(self, fd: int, fallback: _Fallback, name: str) -> None:
        super().__init__()
        self._fd = fd
        self._fallback = fallback
        self.name = name

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._fd

    def isatty(self) -> bool:
        return os.isatty(self._fd)

    def write(self, data: Any) -> int:  # bytes-like: io.RawIOBase's own signature
        try:
            return os.write(self._fd, data)
        except OSError as error:
            if error.errno not in LOG_WRITE_ERRORS or self._fallback.offsets is not None:
                raise
        self._fallback.fall_back()
        return os.write(self._fd, data)  # where the launcher sends it, as without mldebug


_replaced_streams: list = []  # the interpreter's own stdout/stderr objects, kept alive


def _guarded_stream(old: io.TextIOWrapper, fd: int, fallback: _Fallback) -> io.TextIOWrapper:
    raw = _LogWriter(fd, fallback, getattr(old, "name", f"<fd {fd}>"))
    stream = io.TextIOWrapper(
        io.BufferedWriter(raw),
        encoding=old.encoding,
        errors=old.errors,
        line_buffering=old.line_buffering,
        write_through=getattr(old, "write_through", False),
    )
    _replaced_streams.append(old)
    return stream


def _redirect_to_files(safeio: ModuleType, stdout_path: Path, stderr_path: Path) -> None:
    """Point fds 1 and 2 at the log files; sys.stdout/sys.stderr fall back when the log
    cannot be written (see the module doc)."""
    targets = {}
    try:
        for fd, path in ((1, stdout_path), (2, stderr_path)):
            targets[fd] = safeio.open_append(path)
    except OSError:
        for target in targets.values():
            os.close(target)
        return  # the output stays where the launcher sent it
    fallback = _Fallback({fd: os.dup(fd) for fd in targets})
    for name, fd in (("stdout", 1), ("stderr", 2)):
        stream = getattr(sys, name)
        if stream is not None:
            stream.flush()
        os.dup2(targets[fd], fd)
        os.close(targets[fd])
        try:
            if stream is None or stream.fileno() != fd:
                continue
            guarded = _guarded_stream(stream, fd, fallback)
        except Exception:
            continue  # a stream someone replaced already: left as it is
        setattr(sys, name, guarded)
        if getattr(sys, f"__{name}__", None) is stream:
            setattr(sys, f"__{name}__", guarded)


def _answer_stack_requests(safeio: ModuleType, paths: RunPaths, rank: int) -> int | None:
    """Start what answers `dump` without ptrace: the thread (agent/stackthread.py), and the
    signal (agent/stacksignal.py) that writes to the rank's stacks file. The signal, or
    None."""
    global _stacks_file
    procfs, rankrules = _sibling("files.procfs"), _sibling("rankrules")
    try:
        from . import stackthread

        ticks = procfs.proc_start_ticks()
        if ticks is not None:
            name = rankrules.stack_socket_name(os.getpid(), ticks)
            stackthread.start(name, rankrules.socket_peer)
    except Exception:
        pass  # `dump` sends the signal instead
    try:
        _stacks_file = os.fdopen(safeio.open_append(paths.stacks_file(rank)), "a", encoding="utf-8")
        from . import stacksignal

        signals = rankrules.stack_signals()
        return stacksignal.register(_stacks_file, signals, procfs.caught_signals())
    except Exception:
        return None  # the thread's answers only; the program runs as it would


def _write_quietly(write_json: WriteJson, path: Path, data: dict) -> bool:
    """A file of the agent's, or nothing: a full disk must not reach the program."""
    try:
        write_json(path, data)
    except Exception:
        return False
    return True


def _line_buffer_stdout() -> None:
    reconfigure = getattr(sys.stdout, "reconfigure", None)
    if reconfigure is not None:
        reconfigure(line_buffering=True)


def activate() -> None:
    global _fault_file
    run_dir = os.environ.get(ENV_RUN_DIR)
    if not run_dir:
        return
    rankrules = _sibling("rankrules")
    identity = rankrules.rank_identity(os.environ)
    if identity is None or is_launcher(getattr(sys, "orig_argv", sys.argv)):
        return  # a launcher or a helper process: nothing of a rank to watch
    rank, local_rank, world_size = identity
    if not claim_rank(os.environ, rank, os.getpid()):
        return  # a DataLoader worker or subprocess of a rank that already has its agent
    rundir, safeio = _sibling("files.rundir"), _sibling("files.safeio")
    paths = rundir.RunPaths(Path(run_dir))
    safeio.make_private_dir(paths.rank_dir(rank))
    host = rundir.hostname()
    stack_signal = _answer_stack_requests(safeio, paths, rank)
    # proc.json first: the launcher only tails a wrapped rank's files once it knows who it is.
    known = _write_quietly(
        safeio.write_json_atomic,
        paths.proc_info(rank),
        {
            "rank": rank,
            "local_rank": local_rank,
            "world_size": world_size,
            "host": host,
            "pid": os.getpid(),
            "start_time": time.time(),
            "start_ticks": _sibling("files.procfs").proc_start_ticks(),
            "owner": os.environ[ENV_OWNER],
            # what `dump` needs to ask for stacks without ptrace (agent/stacksignal.py)
            "stack_signal": stack_signal,
            "main_thread": threading.main_thread().ident,
        },
    )
    if os.environ.get(ENV_MODE) == MODE_WRAP and known:
        _redirect_to_files(safeio, paths.stdout(rank), paths.stderr(rank))
    _line_buffer_stdout()
    import faulthandler

    try:
        fault_fd = safeio.open_append(paths.fault_log(rank))
    except OSError:
        pass  # no stacks at a fatal signal; the program runs as it would
    else:
        _fault_file = os.fdopen(fault_fd, "a", encoding="utf-8")
        faulthandler.enable(file=_fault_file, all_threads=True)
    install_excepthook(
        paths.error_file(rank), rank, host, safeio.write_json_atomic, rankrules.is_library_path
    )
    atexit.register(_note_normal_exit, paths.exit_file(rank), safeio.write_json_atomic, os.getpid())
    _start_parts(rank, paths, safeio, rankrules)


class _Runtime:
    """The parts of a running agent, for the parts that need each other and for
    `mldebug.step()` (through `set_step`)."""

    def __init__(
        self, rank: int, paths: RunPaths, safeio: ModuleType, rankrules: ModuleType
    ) -> None:
        from . import eventlog
        from .collectives import Tracer
        from .compiles import Compiles
        from .heartbeat import Heartbeat, interval_from
        from .memory import Memory
        from .steps import Steps
        from .timing import Timing, enabled

        self.rank = rank
        self.paths = paths
        self.safeio = safeio
        self.rankrules = rankrules
        self.started = time.time()
        self.memory = Memory(rank_dir=str(paths.rank_dir(rank)), safeio=safeio)
        self.tracer = Tracer(rankrules)
        self.timing = Timing(self.tracer, rankrules) if enabled(os.environ) else None
        self.steps = Steps(on_change=self._stepped)
        if self.timing is not None:
            self.tracer.on_done = self.timing.collective_done
        eventlog.configure(
            paths.events_file(rank), rank, safeio.open_append, lambda: self.steps.value
        )
        self.heartbeat = Heartbeat(
            paths.state_file(rank),
            safeio.write_json_atomic,
            rank,
            self.started,
            self.tracer,
            self.steps,
            self.memory,
            interval_from(os.environ),
            timing=self.timing,
            compiles=Compiles(rankrules),
        )

    def _stepped(self, value: int, now: float) -> None:
        self.memory.on_step(value, now)
        if self.timing is not None:
            self.timing.on_step(value, now)

    def forked(self) -> None:
        """In a process forked from the rank (a DataLoader worker): nothing is recorded
        (the heartbeat thread did not come along; the events writer checks its pid)."""
        self.tracer.off = True
        self.steps.off = True
        self.memory.off = True
        if self.timing is not None:
            self.timing.off = True


def _start_collectives(runtime: _Runtime) -> None:
    from . import collectives, importhook

    def patch(c10d: Any) -> None:
        try:
            collectives.install(c10d, runtime.tracer)
        except Exception as error:
            runtime.tracer.stop(error)

    importhook.when_imported("torch.distributed.distributed_c10d", patch, collectives.PART)


def _start_steps(runtime: _Runtime) -> None:
    from . import importhook, steps

    importhook.when_imported(
        "torch.optim.optimizer", lambda module: steps.install(module, runtime.steps), steps.PART
    )


def _start_timing(runtime: _Runtime) -> None:
    from . import importhook, timing

    if runtime.timing is None:
        return
    part = runtime.timing

    def hook(install: Callable[[Any, Any], object]) -> Callable[[Any], None]:
        def run(module: Any) -> None:
            try:
                install(module, part)
            except Exception as error:
                part.stop(error)

        return run

    importhook.when_imported(
        "torch.utils.data.dataloader", hook(timing.install_dataloader), timing.PART
    )
    importhook.when_imported("torch", hook(timing.install_syncs), timing.PART)
    importhook.when_imported("torch.cuda", hook(timing.install_cuda_sync), timing.PART)


def _start_memory(runtime: _Runtime) -> None:
    from . import importhook, memory

    importhook.when_imported("torch.cuda", runtime.memory.watch_oom, memory.PART)


def _start_anomaly(runtime: _Runtime) -> None:
    from . import anomaly

    anomaly.start(runtime)


def _start_tiny_model(runtime: _Runtime) -> None:
    from . import tinymodel

    tinymodel.start()


def _start_heartbeat(runtime: _Runtime) -> None:
    runtime.heartbeat.start()
    atexit.register(runtime.heartbeat.stop)


def _start_parts(rank: int, paths: RunPaths, safeio: ModuleType, rankrules: ModuleType) -> None:
    """Start each watching part on its own: one that fails to start is said once (an
    agent_error event and a stderr line) and the others go on. A new part (the NaN/Inf
    hooks of agent/anomaly.py) adds its `(name, start)` pair to PARTS below."""
    global _runtime
    from . import eventlog

    try:
        runtime = _Runtime(rank, paths, safeio, rankrules)
    except Exception as error:
        eventlog.fail("agent", error)
        return
    PARTS = [
        ("collectives", _start_collectives),
        ("steps", _start_steps),
        ("memory", _start_memory),
        ("timing", _start_timing),  # where each step's time goes (agent/timing.py)
        ("anomaly", _start_anomaly),  # NaN/Inf origin hooks (agent/anomaly.py)
        ("tiny-model", _start_tiny_model),  # --tiny-model (agent/tinymodel.py)
        ("heartbeat", _start_heartbeat),
    ]
    for name, start in PARTS:
        try:
            start(runtime)
        except Exception as error:
            eventlog.fail(name, error)
    os.register_at_fork(after_in_child=runtime.forked)
    _runtime = runtime


def set_step(n: int | None = None) -> None:
    """`mldebug.step(n)` in a rank under `mldebug run`: the program's own step count."""
    runtime = _runtime
    if runtime is not None:
        runtime.steps.set(n)


def _note_normal_exit(path: Path, write_json: WriteJson, pid: int) -> None:
    """Python shuts down normally; a rank that dies of a signal never gets here."""
    if os.getpid() != pid:
        return  # a process forked from the rank (it inherits atexit) is not the rank
    _write_quietly(write_json, path, {"pid": pid, "time": time.time()})
