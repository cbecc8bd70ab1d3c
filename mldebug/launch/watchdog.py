"""The hang watchdog of `mldebug run --hang-timeout SECS`: a dump nobody had to ask for.

Once a second a thread of its own looks at what moves while the job works:

  * once any rank's agent has counted a step or a collective (ranks/<rank>/state.json,
    docs/agent.md), progress is a rank's step or collective count moving
    (`AgentState.progress`); its heartbeat alone is not, nor is its output (a logging
    thread can print forever while the training loop hangs);
  * before that (ranks importing torch, loading data, meeting at init_process_group) and for
    ranks without an agent (a job whose ranks are not Python), progress is output: a byte
    more in any rank's log or in the launcher's.

When nothing moved for SECS while a process of the job lives, it looks at the job as
`mldebug dump --run` does (`mldebug.observe.look`, bounded by DUMP_DEADLINE), and the dump decides
(analysis.quiet):

  * a hang (an error finding: a wait longer than the hang threshold, a frozen rank...): the
    report is written as reports/hang-<time>.txt and .json, the verdict and where the report
    is are said on the console and noted in run.json (`hangs`); with `--on-hang stop` the
    job is stopped, once a last look at its progress says it still has not moved. Once per
    hang: it fires again only after something moved;
  * every rank computing (an evaluation, a checkpoint written, imports and the first
    compile): an info line and report, "not a hang". The place is learned: a quiet phase
    that comes back there (evaluation every N steps) is not reported again;
  * ranks compiling (torch.compile, analysis/compiling.py) and no error: a line, "not a
    hang", and another look SECS later; a compile is never a reason to stop the job;
  * anything else (a wait still too short to call a hang): a line and a report, and another
    look SECS later: the severity grows with the wait (analysis.severity).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mldebug.analysis.quiet import COMPILING, HANG, WORKING, QuietVerdict, judge_quiet
from mldebug.collect.agentstate import read_state
from mldebug.files.rundir import RunPaths
from mldebug.files.safeio import create_new, make_private_dir
from mldebug.launch.flight import request_dumps, wait_for_dumps
from mldebug.textsafe import printable

if TYPE_CHECKING:
    from mldebug.model import JobSnapshot

ON_HANG_KEEP = "keep"
ON_HANG_STOP = "stop"
CHECK_EVERY = 1.0  # seconds between two looks at the job
DUMP_DEADLINE = 30.0  # the whole dump's stack readings end within this
MAX_RANKS_LOOKED_AT = 4096  # as a refresh of the live view


@dataclass(frozen=True)
class HangReport:
    """One hang, as the watchdog reported it."""

    time: float  # when it fired
    quiet: float  # seconds without progress by then
    verdict: str  # the dump's first finding, or why there is no dump
    text_path: Path | None = None
    json_path: Path | None = None
    snapshot: JobSnapshot | None = None  # when the dump worked

    def to_json(self) -> dict:
        return {
            "time": self.time,
            "no_progress_for": round(self.quiet, 1),
            "verdict": self.verdict,
            "report": str(self.text_path) if self.text_path else None,
            "json": str(self.json_path) if self.json_path else None,
        }


def _size(path: Path) -> int:
    try:
        return os.lstat(path).st_size
    except OSError:
        return -1


def progress_token(paths: RunPaths) -> tuple:
    """What changes whenever the job makes progress (see the module's doc): two equal tokens
    a while apart say nothing moved in between."""
    ranks = paths.rank_ids()[:MAX_RANKS_LOOKED_AT]
    marks = []
    for rank in ranks:
        state = read_state(paths.root, rank)
        marks.append((rank, None if state is None else state.progress))
    if any(mark is not None and mark != (-1, 0, 0) for _, mark in marks):
        return ("agent", tuple(marks))
    sizes = [_size(paths.launcher_log)]
    for rank in ranks:
        sizes += [_size(paths.stdout(rank)), _size(paths.stderr(rank))]
    return ("output", tuple(sizes))


def dump_job(
    root: Path, deadline: float = DUMP_DEADLINE, error_after: float | None = None
) -> tuple[JobSnapshot, tuple[str, ...]]:
    """(snapshot, notes) of the job, as `mldebug dump --run ROOT` reads it."""
    from mldebug.observe.look import look_at_run

    return look_at_run(root, deadline, error_after)


# How the views say a look (report/hang.py's hang_report, handed in by the command that
# starts the launcher): (verdict line, report text, report JSON).
Render = Callable[[object, Sequence[str]], tuple[str, str, dict]]


def _write_new(path: Path, content: str) -> None:
    fd = create_new(path)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(content if content.endswith("\n") else content + "\n")


def write_reports(paths: RunPaths, when: float, body: str, data: dict) -> tuple[Path, Path]:
    folder = make_private_dir(paths.reports_dir)
    stem = "hang-" + time.strftime("%Y%m%d-%H%M%S", time.localtime(when))
    for index in range(1000):
        name = f"{stem}-{index}" if index else stem
        text_path, json_path = folder / f"{name}.txt", folder / f"{name}.json"
        if os.path.lexists(text_path) or os.path.lexists(json_path):
            continue
        _write_new(text_path, body)
        _write_new(json_path, json.dumps(data, indent=1))
        return text_path, json_path
    raise OSError(f"too many reports named {stem}* in {folder}")


def _request_flight_dumps(paths: RunPaths) -> Path | None:
    """--flight-recorder: ask every rank for its dump (None without it, or if that failed)."""
    try:
        return request_dumps(paths.root)
    except OSError:
        return None


class HangWatchdog:
    """Watches one run; `start()` runs it in a daemon thread until `close()`.

    render(snapshot, notes): the views' (verdict line, report text, report JSON) of a look.
    alive(): a process of the job still runs. say(text): a message on the console.
    stop(): end the job (--on-hang stop). record(reports): the hangs so far, for run.json.
    dump(root): (snapshot, notes) of the job, or raises. The clock is injectable for tests.
    """

    def __init__(
        self,
        paths: RunPaths,
        timeout: float,
        on_hang: str = ON_HANG_KEEP,
        *,
        render: Render,
        alive: Callable[[], bool],
        say: Callable[[str], None],
        stop: Callable[[], None] | None = None,
        record: Callable[[list[dict]], None] | None = None,
        dump: Callable | None = None,
        clock: Callable[[], float] = time.monotonic,
        check_every: float = CHECK_EVERY,
    ) -> None:
        self.paths = paths
        self.timeout = timeout
        self.on_hang = on_hang
        self._alive, self._say, self._stop, self._record = alive, say, stop, record
        self._render = render
        from mldebug.observe.look import hang_threshold

        threshold = hang_threshold(timeout)
        self._dump = dump or (lambda root: dump_job(root, DUMP_DEADLINE, threshold))
        self._clock = clock
        self.check_every = check_every
        self.reports: list[HangReport] = []  # the hangs
        self.quiet_reports: list[HangReport] = []  # looks that found no hang
        self.learned: set[tuple[str, str]] = set()  # places of quiet phases the job has
        self._token: tuple | None = None
        self._since = clock()  # the last progress (the start counts as progress)
        self._fired = False  # reported this hang already; re-armed by progress
        self._next_look = timeout  # quiet seconds at which the next look is due
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mldebug-watchdog", daemon=True)

    @property
    def hang_snapshot(self) -> JobSnapshot | None:
        """The dump of the hang the job is in now (nothing moved since), if it worked."""
        if self._fired and self.reports:
            return self.reports[-1].snapshot
        return None

    def start(self) -> None:
        self._thread.start()

    def close(self, wait: float = 2.0) -> None:
        """Stop watching; a dump under way may finish, but says nothing after `wait`."""
        self._closed.set()
        if self._thread.is_alive():
            self._thread.join(wait)

    def _run(self) -> None:
        while not self._closed.wait(self.check_every):
            try:
                self.check()
            except Exception as error:  # a bug here must not end the job, nor this thread
                self._say(
                    f"mldebug: the hang watchdog failed ({type(error).__name__}: {error}); "
                    "it stops watching. This is a bug in mldebug: please report it."
                )
                return

    def _moved(self) -> bool:
        """Progress since the last look (and the clock of the quiet restarted if so)."""
        token = progress_token(self.paths)
        if token == self._token:
            return False
        self._token, self._since, self._fired = token, self._clock(), False
        self._next_look = self.timeout
        return True

    def check(self) -> HangReport | None:
        """One look at the job: the report when this look found a hang and reported it."""
        if self._moved():
            return None
        quiet = self._clock() - self._since
        if self._fired or quiet < self._next_look or not self._alive():
            return None
        self._next_look = quiet + self.timeout  # a look that finds no hang: again later
        return self.fire(quiet)

    def _look(self, quiet: float) -> tuple[JobSnapshot | None, str, str, dict]:
        """(snapshot or None, verdict text, report body, report data) of one dump."""
        try:
            snapshot, notes = self._dump(self.paths.root)
        except Exception as error:
            verdict = f"no dump ({printable(str(error)).splitlines()[0][:300]})"
            body = f"mldebug: no progress for {quiet:.0f}s; the dump failed: {verdict}\n"
            data: dict = {"verdict": None, "error": verdict, "findings": [], "ranks": []}
            return None, verdict, body, data
        verdict, body, data = self._render(snapshot, notes)
        return snapshot, verdict, body, data

    def _write(
        self, when: float, body: str, data: dict, flight: Path | None
    ) -> tuple[Path | None, Path | None, str]:
        text_path = json_path = None
        try:
            text_path, json_path = write_reports(self.paths, when, body, data)
            where = f"\n  report: {text_path} (and .json)"
        except OSError as error:
            where = f"\n  the report could not be written ({error}): the verdict above is all"
        if flight is not None:
            where += f"\n  Flight Recorder: each rank writes {flight}/rank_<rank>"
        return text_path, json_path, where

    def fire(self, quiet: float) -> HangReport | None:
        """Look at the quiet job; the report when the look found a hang."""
        when = time.time()
        flight = _request_flight_dumps(self.paths)
        if flight is not None:  # the ranks dump from their heartbeat: a second or so
            wait_for_dumps(flight, self.paths.rank_ids(), when - 1.0)
        snapshot, verdict, body, data = self._look(quiet)
        judged = judge_quiet(snapshot) if snapshot is not None else QuietVerdict("failed")
        if judged.kind == WORKING and judged.place is not None and judged.place in self.learned:
            return None  # a quiet phase this job has had before, at the same place
        data["no_progress_for"] = round(quiet, 1)
        data["watchdog"] = judged.kind
        text_path, json_path, where = self._write(when, body, data, flight)
        report = HangReport(when, quiet, verdict, text_path, json_path, snapshot)
        if judged.kind != HANG:
            self.quiet_reports.append(report)
            if judged.place is not None:
                self.learned.add(judged.place)
            if not self._closed.is_set():
                self._say(self._not_a_hang(quiet, judged, verdict, where))
            return None
        self._fired = True
        self.reports.append(report)
        if self._record is not None:
            self._record([r.to_json() for r in self.reports])
        if self._closed.is_set():
            return report  # the job ended meanwhile: its own summary is what counts now
        stopping = self.on_hang == ON_HANG_STOP and self._stop is not None
        if stopping and self._moved():  # the last look before stopping: it moved after all
            self._say(
                f"mldebug: no progress for {self.timeout:g}s; verdict: {verdict}{where}\n"
                "  the job moved again before it was stopped: it keeps running"
            )
            return report
        then = (
            "stopping the job (--on-hang stop)"
            if stopping
            else "the job keeps running (--on-hang stop would end it)"
        )
        self._say(
            f"mldebug: no progress for {self.timeout:g}s; verdict: {verdict}{where}\n  {then}"
        )
        if stopping and self._stop is not None:
            self._stop()
        return report

    def _not_a_hang(self, quiet: float, judged: QuietVerdict, verdict: str, where: str) -> str:
        if judged.kind == WORKING:
            return (
                f"mldebug: no step or collective for {quiet:.0f}s, but every rank is computing "
                f"in {judged.where}: not a hang{where}"
            )
        if judged.kind == COMPILING:  # never stopped for: a compile ends
            return (
                f"mldebug: no step or collective for {quiet:.0f}s; not a hang: {verdict}{where}"
                f"\n  looking again in {self.timeout:g}s"
            )
        return (
            f"mldebug: no step or collective for {quiet:.0f}s; not a hang yet: {verdict}{where}"
            f"\n  looking again in {self.timeout:g}s"
        )
