"""How a run ended, from what was seen of it: the exit code, the final status, run.json's
first failure and what the console is told. Pure: the supervisor gathers the facts (exit
codes, the failures read from the ranks' files, a collective timeout's explanation) and
`conclude` judges them, so every ending can be tested without starting a process.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from pathlib import Path

from mldebug.analysis.exit_waits import Explanation
from mldebug.files.rundir import STATUS_FAILED, STATUS_INTERRUPTED, STATUS_SUCCEEDED, RunPaths
from mldebug.launch.failures import Failure, exit_code_of, format_report, job_outcome
from mldebug.launch.logbook import incomplete_logs_note

HANG_EXIT_CODE = 124  # the job was stopped by --on-hang stop (as timeout(1) says)


@dataclass(frozen=True)
class Outcome:
    exit_code: int
    status: str
    failures: tuple[Failure, ...]  # the ones worth reporting, the root cause first
    first_failure: dict | None  # run.json's first_failure
    messages: tuple[str, ...]  # what the console is told, in order


def plain_outcome(
    *,
    interrupted: int | None,
    hang_stop: bool,
    launcher_returncode: int | None,
    wrap: bool,
    first_failed_returncode: int | None,
) -> tuple[int, str]:
    """The exit code and status from what mldebug saw itself, no file read: what comes out
    when summing up the run fails. interrupted: the signal that stopped the job (0: stop()
    without one), None when nobody stopped it."""
    if interrupted is not None and hang_stop:
        return HANG_EXIT_CODE, STATUS_FAILED
    if interrupted is not None:
        return 128 + (interrupted or signal.SIGINT), STATUS_INTERRUPTED
    if wrap:
        code = exit_code_of(launcher_returncode) if launcher_returncode is not None else 1
        return code, STATUS_FAILED if code else STATUS_SUCCEEDED
    if first_failed_returncode is None:
        return 0, STATUS_SUCCEEDED
    return exit_code_of(first_failed_returncode), STATUS_FAILED


def wants_explanation(
    failures: list[Failure], interrupted: int | None, launcher_returncode: int | None
) -> bool:
    """Is a collective-timeout explanation of `failures` worth reading? Only when they are
    reported: nobody stopped the job, and a wrapped launcher did not recover from them."""
    if not failures or interrupted is not None:
        return False
    return launcher_returncode is None or exit_code_of(launcher_returncode) != 0


def conclude(
    failures: list[Failure],
    *,
    paths: RunPaths,
    interrupted: int | None,
    hang_stop: bool,
    launcher_returncode: int | None,
    stopped: list[int],
    explanation: Explanation | None = None,
    logs_incomplete: dict | None = None,
    wrap: bool = False,
    hang_timeout: float = 0.0,
    hang_report: Path | None = None,
) -> Outcome:
    """Judge a run that is over. failures: collect_failures' list (cores attached);
    stopped: the ranks mldebug ended; hang_report: the watchdog's last report file, when it
    stopped the job (--on-hang stop)."""
    code, status, failures = job_outcome(failures, interrupted, launcher_returncode)
    is_interrupted = status == STATUS_INTERRUPTED
    hang_stopped = is_interrupted and hang_stop
    if hang_stopped:  # not the user's Ctrl-C: the job failed, by hanging
        code, status, is_interrupted = HANG_EXIT_CODE, STATUS_FAILED, False
    if not failures or is_interrupted or hang_stopped:
        explanation = None
    first = failures[0].to_json() if failures else None
    if first is not None and explanation is not None:
        cause = explanation.cause
        first["collective_timeout"] = True
        first["root_cause"] = cause.to_json() if cause is not None else None
        first["waits"] = list(explanation.waits)
    messages = []
    if hang_stopped:
        where = f"; the hang report: {hang_report}" if hang_report else ""
        messages.append(
            f"mldebug: job stopped: no progress for {hang_timeout:g}s "
            f"(--on-hang stop){where}; exit code {code}"
        )
    elif failures and not is_interrupted:
        failed = {failure.rank for failure in failures}
        report = format_report(
            failures, paths, [r for r in stopped if r not in failed], explanation
        )
        note = incomplete_logs_note(logs_incomplete or {}, failures[0].rank, native=not wrap)
        if note:  # after the "full output" line it qualifies
            head, sep, tail = report.rpartition("\n  what to do next")
            report = head + note + sep + tail if sep else report + note
        messages.append(report)
    elif wrap and code != 0 and not is_interrupted:
        messages.append(f"mldebug: the launcher exited with code {code}; see {paths.launcher_log}")
    if is_interrupted:
        messages.append(f"mldebug: job stopped; its files are in {paths.root}")
    return Outcome(code, status, tuple(failures), first, tuple(messages))


def internal_error_line(what: str, error: Exception) -> str:
    """The one line said for a bug of mldebug's met while `what` (the job goes on)."""
    text = str(error).strip().splitlines()
    return (
        f"mldebug: internal error while {what} ({type(error).__name__}"
        + (f": {text[0][:300]}" if text else "")
        + "); the job's exit code is kept. This is a bug in mldebug: please report it."
    )


def internal_error_traceback(error: Exception) -> str:
    """The traceback to add to that line, with MLDEBUG_DEBUG=1; "" otherwise."""
    if os.environ.get("MLDEBUG_DEBUG", "") in ("", "0"):
        return ""
    import traceback

    return "\n" + "".join(traceback.format_exception(error)).rstrip()
