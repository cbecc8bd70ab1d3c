"""Name why a rank ended and find the first failure of a job.

A failure comes from the rank's own error file (written by the agent's excepthook, with the
time the exception reached the top) or, when there is none, from the exit status the
supervisor saw, timed by the last moment the rank was seen alive. The earliest one is the
root cause: the others usually fail *because* of it (a peer's closed connection, a
collective that timed out).

Error files are input: a field of any JSON type (a string time, a list message, 1e400)
is taken for missing, never raised on, so the job's exit code always comes out.
"""

from __future__ import annotations

import math
import os
import signal
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from mldebug.files.rundir import STATUS_FAILED, STATUS_INTERRUPTED, STATUS_SUCCEEDED, RunPaths
from mldebug.files.safeio import read_json, read_tail
from mldebug.wording import finding_text

if TYPE_CHECKING:
    from mldebug.analysis.exit_waits import Explanation

RECIPE = "rank-crash"
RECIPE_TIMEOUT = "collective-hang"  # a collective timeout nothing explains
# Ways a rank fails that have their own recipe; everything else is RECIPE.
RECIPE_NATIVE = "native-crash"  # killed by a signal of its own making: C/C++/CUDA code
NATIVE_SIGNALS = (signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGILL, signal.SIGFPE)
RECIPE_BY_EXCEPTION = (
    ("TinyModelError", "tiny-model-repro"),  # --tiny-model could not build the model
    ("OutOfMemoryError", "cuda-oom"),
)

_SIGNAL_MEANINGS: dict[int, str] = {
    signal.SIGKILL: "killed (SIGKILL): OOM killer? (check `dmesg` or the job's memory limit)",
    signal.SIGSEGV: "segmentation fault (SIGSEGV): a crash in native code",
    signal.SIGABRT: "aborted (SIGABRT): a C++ assertion, abort() or an uncaught C++ exception",
    signal.SIGBUS: "bus error (SIGBUS): bad memory access, often a full /dev/shm",
    signal.SIGFPE: "floating point exception (SIGFPE): e.g. an integer division by zero",
    signal.SIGILL: "illegal instruction (SIGILL): a binary built for another CPU",
    signal.SIGTERM: "terminated (SIGTERM)",
    signal.SIGINT: "interrupted (SIGINT)",
    signal.SIGHUP: "hung up (SIGHUP): the terminal or session closed",
    signal.SIGPIPE: "broken pipe (SIGPIPE): it wrote to a closed pipe",
}


# How a wrapped rank ended when mldebug only knows it is gone (the launcher has its status).
ABRUPT_END = (
    "ended without a Python exception or a normal exit: killed by a signal "
    "(SIGKILL: the OOM killer? or its launcher stopping it); its exit status is in launcher.log"
)
ABRUPT_NATIVE_CRASH = "crashed in native code (faulthandler caught a fatal signal)"


def exit_code_of(returncode: int) -> int:
    """A shell-style exit code: 128+N for death by signal N (Popen reports -N)."""
    return 128 - returncode if returncode < 0 else returncode


def signal_of(exit_code: int) -> int | None:
    """The signal behind a shell-style exit code, if it is one (129..128+64)."""
    if 128 < exit_code <= 128 + 64:
        return exit_code - 128
    return None


def describe_exit(returncode: int) -> str:
    """'exited with code 3', 'segmentation fault (SIGSEGV): ...' from a Popen returncode."""
    if returncode >= 0:
        return f"exited with code {returncode}"
    number = -returncode
    try:
        name = signal.Signals(number).name
    except ValueError:
        return f"killed by signal {number}"
    return _SIGNAL_MEANINGS.get(number, f"killed by {name}")


@dataclass(frozen=True)
class Failure:
    rank: int
    time: float  # when the exception reached the top, else when last seen alive
    host: str = ""
    exit_code: int | None = None  # shell-style; None when mldebug did not see the exit
    how: str = ""  # describe_exit() text, or "uncaught exception"
    exc_type: str = ""
    message: str = ""
    location: str = ""  # file:line of the raising frame
    user_location: str = ""  # innermost frame of the user's own code, when different
    traceback: str = ""
    fault_log: str = ""  # Python stacks faulthandler wrote on a fatal signal
    extra: dict = field(default_factory=dict)
    # mldebug stopped it while it was still ending after its exception: its exit code is
    # mldebug's signal, not the job's.
    stopped: bool = False

    @property
    def recipe(self) -> str:
        """The recipe for the way this rank failed."""
        for name, recipe in RECIPE_BY_EXCEPTION:
            if self.exc_type.rsplit(".", 1)[-1] == name:
                return recipe
        crashed = self.exit_code is not None and signal_of(self.exit_code) in NATIVE_SIGNALS
        return RECIPE_NATIVE if crashed and not self.exc_type else RECIPE

    @property
    def headline(self) -> str:
        """One line: a long message (a state_dict's missing keys) is in the traceback."""
        if not self.exc_type:
            return self.how
        first, *more = self.message.strip().splitlines() or [""]
        if not first:
            return self.exc_type
        return f"{self.exc_type}: {first}" + (" ..." if more else "")

    def to_json(self) -> dict:
        return {
            "rank": self.rank,
            "host": self.host,
            "time": self.time,
            "exit_code": self.exit_code,
            "how": self.how,
            "type": self.exc_type,
            "message": self.message,
            "location": self.location,
            "user_location": self.user_location,
            "traceback": self.traceback,
            "recipe": self.recipe,
            **({"core": self.extra["core"]} if self.extra.get("core") else {}),
        }


def _text(value: object) -> str:
    """A string field of a file, or "" when it is anything else."""
    return value if isinstance(value, str) else ""


def _seconds(value: object, fallback: float) -> float:
    """A finite time field of a file, or `fallback` (a string, a list, inf, NaN...)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            seconds = float(value)
        except OverflowError:  # an int too large for a float
            return fallback
        if math.isfinite(seconds):
            return seconds
    return fallback


def failure_from_error_file(data: dict, rank: int, fallback_time: float = 0.0) -> Failure:
    return Failure(
        rank=rank,
        time=_seconds(data.get("time"), fallback_time),
        host=_text(data.get("host")),
        how="uncaught exception",
        exc_type=_text(data.get("type")),
        message=_text(data.get("message")),
        location=_text(data.get("location")),
        user_location=_text(data.get("user_location")),
        traceback=_text(data.get("traceback")),
    )


def raised_before(paths: RunPaths, rank: int, moment: float) -> bool:
    """Whether the rank's error file holds an exception of its own, raised before `moment`
    (time.time()): a rank mldebug stopped while it was ending after it failed by itself.
    A KeyboardInterrupt is the stop's, not the rank's."""
    data = read_json(paths.error_file(rank))
    if not data or _text(data.get("type")) in ("", "KeyboardInterrupt"):
        return False
    return _seconds(data.get("time"), math.inf) <= moment


# Errors a rank raises because a peer went away: the peer's end is the cause. A rank killed
# by a signal is seen dead only at the supervisor's next look, while its peers' errors carry
# the moment they were raised; such errors count PEER_LAG seconds later than they say.
PEER_GONE = (
    "Connection closed by peer",
    "Connection reset by peer",
    "remote worker crashing",
    "remote process exited",
)
PEER_LAG = 2.0


def _peer_went_away(failure: Failure) -> bool:
    return any(text in failure.message for text in PEER_GONE)


def order_failures(failures: list[Failure]) -> list[Failure]:
    """Earliest first (an error about a peer that went away: PEER_LAG later); ties broken
    by rank so the report is stable."""

    def when(failure: Failure) -> tuple[float, int]:
        return failure.time + (PEER_LAG if _peer_went_away(failure) else 0.0), failure.rank

    return sorted(failures, key=when)


def read_fault_log(paths: RunPaths, rank: int, limit: int = 4000) -> str:
    try:
        data, _ = read_tail(paths.fault_log(rank), limit * 4)  # 4: the most bytes of a char
    except OSError:
        return ""
    return data.decode("utf-8", errors="replace").strip()[-limit:]


def _exists(path: str | os.PathLike) -> bool:
    try:
        os.lstat(path)
    except (OSError, ValueError):
        return False
    return True


def collect_failures(
    paths: RunPaths,
    exits: dict[int, tuple[int, float]],
    stopped: set[int] | frozenset[int] = frozenset(),
    hosts: dict[int, str] | None = None,
    vanished: dict[int, float] | None = None,
) -> list[Failure]:
    """Every failed rank, earliest first.

    exits: rank -> (Popen returncode, last time seen alive), for ranks mldebug started;
    one that exited with 0 did not fail, whatever its error file says.
    stopped: ranks mldebug itself terminated; their exit by SIGTERM is not a failure of theirs.
    vanished: rank -> last time seen alive, for ranks a wrapped launcher started that ended
    while mldebug watched; without an error file or a normal exit, they died abruptly.
    """
    hosts = {rank: _text(host) for rank, host in (hosts or {}).items()}
    vanished = vanished or {}
    failures = []
    for rank in sorted(set(paths.rank_ids()) | set(exits)):
        returncode, alive = exits.get(rank, (None, None))
        exit_code = exit_code_of(returncode) if returncode is not None else None
        if returncode == 0:
            continue  # code may hand a caught exception to sys.excepthook just to log it
        data = read_json(paths.error_file(rank))
        seen = _seconds(alive, _seconds(vanished.get(rank), 0.0))
        if data and _text(data.get("type")):
            failure = failure_from_error_file(data, rank, fallback_time=seen)
            failures.append(
                replace(
                    failure,
                    exit_code=exit_code,
                    host=failure.host or hosts.get(rank, ""),
                    how=describe_exit(returncode) if returncode else failure.how,
                    stopped=rank in stopped,
                )
            )
        elif returncode and rank not in stopped:
            failures.append(
                Failure(
                    rank=rank,
                    time=seen,
                    host=hosts.get(rank, ""),
                    exit_code=exit_code,
                    how=describe_exit(returncode),
                    fault_log=read_fault_log(paths, rank) if returncode < 0 else "",
                )
            )
        elif rank in vanished and not _exists(paths.exit_file(rank)):
            fault_log = read_fault_log(paths, rank)
            failures.append(
                Failure(
                    rank=rank,
                    time=seen,
                    host=hosts.get(rank, ""),
                    how=ABRUPT_NATIVE_CRASH if fault_log else ABRUPT_END,
                    fault_log=fault_log,
                )
            )
    return order_failures(failures)


def job_outcome(
    failures: list[Failure], stop_signal: int | None, launcher_returncode: int | None
) -> tuple[int, str, list[Failure]]:
    """The job's exit code, run status, and the failures worth reporting.

    stop_signal: None when nobody stopped the job, 0 when stopped by a caller (the TUI),
    else the signal mldebug run received. launcher_returncode: a wrapped launcher's
    (Popen) return code, None in native mode.
    """
    if stop_signal is not None:
        code = 128 + stop_signal if stop_signal else 128 + signal.SIGINT
        return code, STATUS_INTERRUPTED, [f for f in failures if f.exc_type != "KeyboardInterrupt"]
    if launcher_returncode is not None:
        code = exit_code_of(launcher_returncode)
        # With code 0 the launcher recovered (an elastic restart) or chose to ignore them.
        return code, STATUS_FAILED if code else STATUS_SUCCEEDED, failures if code else []
    if failures:
        # The first failure's own code: not the SIGTERM mldebug sent a rank that was still
        # ending after its exception (1, the code of an uncaught exception, if all were).
        own = [f.exit_code for f in failures if f.exit_code and not f.stopped]
        return own[0] if own else 1, STATUS_FAILED, failures
    return 0, STATUS_SUCCEEDED, []


def _indent(text: str, prefix: str = "    ") -> list[str]:
    return [prefix + line for line in text.rstrip().splitlines()]


def with_cores(failures: list[Failure], cores: dict[int, str]) -> list[Failure]:
    """The failures, each with what `mldebug run --core-dumps` found of its core."""
    return [
        replace(f, extra={**f.extra, "core": cores[f.rank]}) if f.rank in cores else f
        for f in failures
    ]


def format_report(
    failures: list[Failure],
    paths: RunPaths,
    stopped: list[int] | None = None,
    explanation: Explanation | None = None,
) -> str:
    """The first-failure summary printed when a job dies (empty when nothing failed).

    `explanation` (analysis.exit_waits.Explanation): the first failure is a collective timeout,
    and this is what the ranks were waiting in and who caused it; the report leads with it.
    """
    from mldebug.ranges import format_ranks
    from mldebug.textsafe import printable

    if not failures:
        return ""
    first = failures[0]
    where = f" on {first.host}" if first.host else ""
    recipe, output_rank = first.recipe, first.rank
    if explanation is not None:
        lines = _timeout_head(first, where, explanation)
        cause = explanation.cause
        recipe = cause.recipe if cause is not None else RECIPE_TIMEOUT
        if cause is not None and cause.culprits:
            output_rank = cause.culprits[0]
    else:
        lines = [f"mldebug: root cause (first failure): rank {first.rank}{where}: {first.headline}"]
        if first.exc_type and first.exit_code is not None and signal_of(first.exit_code):
            lines.append(f"  the process {first.how}")
        if first.location:
            lines.append(f"  raised at {first.location}")
        if first.user_location and first.user_location != first.location:
            lines.append(f"  from your code at {first.user_location}")
        if first.traceback:
            lines += _indent(first.traceback)
        elif first.fault_log:
            lines.append("  Python stacks at the crash (faulthandler):")
            lines += _indent(first.fault_log)
    for other in failures[1:6]:
        delay = other.time - first.time
        lines.append(f"  then rank {other.rank} ({delay:+.1f}s): {other.headline}")
    if len(failures) > 6:
        lines.append(f"  ... and {len(failures) - 6} more failed ranks")
    if first.extra.get("core"):
        lines.append(f"  core file: {first.extra['core']}")
        if recipe != RECIPE_NATIVE:
            lines.append(f"  what it shows: mldebug recipes {RECIPE_NATIVE}")
    if stopped:
        lines.append(f"  mldebug stopped the other ranks: {format_ranks(stopped)}")
    lines.append(f"  full output: {paths.rank_dir(output_rank)}/stderr.log")
    lines += _oom_files(paths, first.rank)
    lines.append(f"  what to do next: mldebug recipes {recipe}")
    # The fields come from files a rank wrote: no escape sequence of theirs reaches the
    # terminal inside mldebug's own report (the rank's own output lines are its own).
    return printable("\n".join(lines))


# What the agent writes when CUDA runs out of memory, before the error reaches the program.
OOM_FILES = (
    ("memory_summary.txt", "CUDA memory when it ran out"),
    ("memory_snapshot.pickle", "allocator snapshot (drag it into https://pytorch.org/memory_viz)"),
)


def _oom_files(paths: RunPaths, rank: int) -> list[str]:
    """Lines pointing at the OOM files the failed rank's agent left, if any."""
    lines = []
    for name, what in OOM_FILES:
        path = paths.rank_dir(rank) / name
        if _exists(path):
            lines.append(f"  {what}: {path}")
    return lines


def _timeout_head(first: Failure, where: str, explanation: Explanation) -> list[str]:
    """A collective timeout first: the cause, what each rank waited in, then the timeout."""
    cause = explanation.cause
    if cause is not None and cause.culprits:
        lines = [f"mldebug: root cause: {finding_text(cause.finding())}"]
    elif cause is not None:
        lines = [f"mldebug: no single rank to blame: {finding_text(cause.finding())}"]
    else:
        lines = [
            f"mldebug: rank {first.rank} timed out in a collective: a symptom, not a cause; "
            "nothing mldebug read says which rank the collective waited for"
        ]
    if explanation.waits:
        lines.append("  what each rank was waiting in when the job failed:")
        lines += [f"    {line}" for line in explanation.waits]
    lines.append(
        f"  first failure: rank {first.rank}{where}: {first.headline} "
        "(a timeout says how the hang ended, not what caused it)"
    )
    at = first.user_location or first.location
    if at:
        lines.append(f"    raised at {at}")
    return lines
