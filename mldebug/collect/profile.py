"""`mldebug dump --profile SECONDS`: every rank's stacks sampled for a few seconds, in parallel.

Each rank gets its own `py-spy record --format speedscope --idle --nonblocking` run (idle
threads included: a rank waiting in a collective is idle), all at once so their samples
cover the same seconds. `parse_speedscope` keeps the main thread's samples in the order
taken (the analysis judges them second by second: a checkpoint pause is not a slow rank)
and counts its distinct stacks; `parse_raw` reads py-spy's raw format (one line per
distinct stack, `frame;frame;... count`, no order). Both are pure and tested on recorded
output. Threads other than the main one are left out. A rank that
cannot be sampled comes back with a typed failure; the others are still returned.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
import threading
from collections.abc import Sequence

from mldebug.collect.pyspy import classify_pyspy_error, find_pyspy
from mldebug.files.procfs import pid_alive
from mldebug.files.safeio import read_head
from mldebug.model import FAIL_ERROR, FAIL_EXITED, FAIL_TIMEOUT, RankTarget
from mldebug.model.timing import SampledStacks

MAX_OUTPUT = 64 << 20  # bytes of py-spy output read per rank
MAX_STACKS = 4096  # distinct stacks kept per rank
MAX_PARALLEL = 64  # py-spy runs at once; more ranks wait their turn
GRACE = 10.0  # seconds past the duration before a py-spy run is killed
_FRAME = re.compile(r"^(?P<function>.*) \((?P<file>.*?)(?::(?P<line>\d+))?\)$")
Stack = tuple[tuple[str, str, int | None], ...]


def _frame(text: str) -> tuple[str, str, int | None]:
    match = _FRAME.match(text)
    if match is None:
        return (text[:200], "?", None)
    line = match.group("line")
    return (match.group("function")[:200], match.group("file")[:500], int(line) if line else None)


def parse_raw(text: str) -> list[tuple[Stack, int]]:
    """(stack outermost first, samples) for each main-thread stack of py-spy's raw output."""
    counted: dict[Stack, int] = {}
    for line in text.splitlines():
        head, _, number = line.rstrip().rpartition(" ")
        if not head or not number.isdigit():
            continue
        frames = tuple(_frame(part) for part in head.split(";") if part)
        if not frames or frames[0][0] in ("_bootstrap", "Thread._bootstrap"):
            continue  # a thread the program started, not its main thread
        if frames[0][0].startswith(("thread (", "process ")):
            frames = frames[1:]  # --threads / --subprocesses prefixes
        if frames and (frames in counted or len(counted) < MAX_STACKS):
            counted[frames] = counted.get(frames, 0) + int(number)
    return list(counted.items())


def parse_speedscope(text: str, pid: int) -> tuple[list[tuple[Stack, int]], tuple[int, ...]]:
    """(counted stacks, the samples in order as indexes into them) of the main thread (its
    profile is named `Thread <pid> ...`) of py-spy's speedscope output. ValueError when the
    text is not one."""
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("not a speedscope file")
    frames = [
        (str(f.get("name") or "??")[:200], str(f.get("file") or "?")[:500],
         f.get("line") if isinstance(f.get("line"), int) else None)
        for f in data.get("shared", {}).get("frames", [])
        if isinstance(f, dict)
    ]  # fmt: skip
    profiles = [p for p in data.get("profiles", []) if isinstance(p, dict)]
    main = next((p for p in profiles if str(p.get("name", "")).startswith(f"Thread {pid} ")), None)
    if main is None:
        return [], ()
    index: dict[Stack, int] = {}
    counts: list[int] = []
    timeline: list[int] = []
    for sample in main.get("samples", [])[: MAX_STACKS * 64]:
        if not isinstance(sample, list):
            continue
        try:
            stack = tuple(frames[i] for i in sample)
        except (IndexError, TypeError):
            continue
        at = index.get(stack)
        if at is None:
            if len(index) >= MAX_STACKS:
                continue
            at = index[stack] = len(counts)
            counts.append(0)
        counts[at] += 1
        timeline.append(at)
    return [(stack, counts[at]) for stack, at in index.items()], tuple(timeline)


def pyspy_record_command(pyspy: str, pid: int, seconds: float, rate: int, path: str) -> list[str]:
    return [
        pyspy,
        "record",
        "--format",
        "speedscope",
        "--idle",
        "--nonblocking",
        "--full-filenames",
        "--rate",
        str(rate),
        "--duration",
        str(max(1, round(seconds))),
        "--pid",
        str(pid),
        "--output",
        path,
    ]


def sample_rank(pyspy: str, target: RankTarget, seconds: float, rate: int) -> SampledStacks:
    rank = target.rank if target.rank is not None else -1
    with tempfile.TemporaryDirectory(prefix="mldebug-profile-") as folder:
        path = os.path.join(folder, "profile.json")
        try:
            done = subprocess.run(
                pyspy_record_command(pyspy, target.pid, seconds, rate, path),
                capture_output=True,
                text=True,
                timeout=seconds + GRACE,
                env={**os.environ, "RUST_BACKTRACE": "0"},
            )
        except subprocess.TimeoutExpired:
            detail = f"py-spy did not finish within {seconds + GRACE:g}s"
            return SampledStacks(rank, target.pid, failure=FAIL_TIMEOUT, failure_detail=detail)
        except OSError as error:
            return SampledStacks(rank, target.pid, failure=FAIL_ERROR, failure_detail=str(error))
        try:
            text = read_head(path, MAX_OUTPUT).decode("utf-8", "replace")
        except OSError:
            text = ""
    if done.returncode != 0 and not text:
        kind, detail = classify_pyspy_error(done.stderr or done.stdout)
        if not pid_alive(target.pid):
            kind, detail = FAIL_EXITED, "the process exited"
        return SampledStacks(rank, target.pid, failure=kind, failure_detail=detail)
    try:
        stacks, timeline = parse_speedscope(text, target.pid)
    except (ValueError, RecursionError, AttributeError):
        detail = "unreadable py-spy output"
        return SampledStacks(rank, target.pid, failure=FAIL_ERROR, failure_detail=detail)
    return SampledStacks(rank, target.pid, tuple(stacks), seconds, timeline=timeline)


def sample_job(
    targets: Sequence[RankTarget], seconds: float, rate: int, pyspy: str | None = None
) -> list[SampledStacks]:
    """Every target sampled at once (one py-spy each), in the targets' order."""
    pyspy = pyspy or find_pyspy()
    chosen = [t for t in targets if t.rank is not None]
    results: list[SampledStacks | None] = [None] * len(chosen)
    gate = threading.Semaphore(MAX_PARALLEL)

    def run(index: int, target: RankTarget) -> None:
        with gate:
            results[index] = sample_rank(pyspy, target, seconds, rate)

    threads = [
        threading.Thread(target=run, args=(i, t), daemon=True, name=f"mldebug-profile-{i}")
        for i, t in enumerate(chosen)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [
        r if r is not None else SampledStacks(t.rank or -1, t.pid, failure=FAIL_ERROR)
        for r, t in zip(results, chosen, strict=True)
    ]
