"""The orchestrator of the gdb path: read native threads (live ranks or core files) with
mldebug.collect.gdb, then hand them to the analysis (mldebug.analysis.native).

`native_of_snapshot` reads every live rank of a look `mldebug dump` takes (py-spy readings
included) with gdb, ranks side by side within a deadline, lines gdb's threads up with
py-spy's and says what the native threads say, for the judge to weigh with the rest. `observe_cores` reads
core files, one per rank, and builds a snapshot from them as from live ranks: the Python
frames py-bt finds in each core go through the same cross-rank verdict.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from mldebug.analysis.native import (
    align,
    core_verdict,
    group_threads,
    placed,
    python_threads,
    thread_findings,
)
from mldebug.analysis.snapshot import see_job
from mldebug.collect import gdb as gdbs
from mldebug.collect.cores import CoreInfo, NotACoreError, core_info, core_plan, rank_from_name
from mldebug.collect.waits import wait_futures
from mldebug.errors import MldebugError, NoTargetError
from mldebug.files.rundir import parse_rank, read_manifest
from mldebug.model import (
    FAIL_ERROR,
    FAIL_TIMEOUT,
    Finding,
    JobReadings,
    JobSnapshot,
    NativeDump,
    RankTarget,
    StackSample,
    ThreadStack,
)

PARALLEL = 2  # gdb runs side by side: each takes ~0.7 GB and a core on a torch rank
MAX_CORES = 1024


def native_of_snapshot(
    snapshot: JobSnapshot,
    readings: JobReadings | None,
    timeout: float = 60.0,
    deadline: float = 120.0,
) -> tuple[tuple[Finding, ...], tuple[NativeDump, ...]]:
    """Every live rank's threads from gdb, lined up with py-spy's: what they say, and the
    threads."""
    gdb = gdbs.find_gdb()
    views = [(v.rank, v.target) for v in snapshot.ranks if v.target is not None and not v.gone]
    ends = time.monotonic() + deadline
    pool = ThreadPoolExecutor(max_workers=PARALLEL, thread_name_prefix="mldebug-gdb")
    futures = {
        pool.submit(gdbs.read_process, gdb, target, min(timeout, deadline), rank): (rank, target)
        for rank, target in views
    }
    try:
        done = wait_futures(futures, max(ends, time.monotonic()) + gdbs.TERM_GRACE + 1)
    except KeyboardInterrupt:
        gdbs.stop_all()  # the reads under way end now: the exit does not wait them out
        raise
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    dumps = []
    for future, (rank, target) in futures.items():
        if future in done:
            dump = future.result()
        else:
            dump = NativeDump(
                rank,
                target.pid,
                failure=FAIL_TIMEOUT,
                failure_detail="not read by the deadline",
            )
        samples = readings.samples.get(target.pid, ()) if readings else ()
        good = [s for s in samples if s.failure is None and s.threads]
        dumps.append(align(dump, good[-1] if good else None))
    dumps.sort(key=lambda d: d.rank if d.rank is not None else -1)
    return tuple(thread_findings(group_threads(dumps))), tuple(dumps)


def read_rank_threads(
    target: RankTarget, rank: int, samples: Sequence[StackSample], timeout: float = 60.0
) -> NativeDump:
    """Every thread of one live rank (the TUI's `g`), lined up with its newest py-spy reading."""
    dump = gdbs.read_process(gdbs.find_gdb(), target, timeout, rank)
    good = [s for s in samples if s.failure is None and s.threads]
    return align(dump, good[-1] if good else None)


# ---- core files ------------------------------------------------------------------------


def _run_ranks(root: Path | None) -> tuple[dict[int, int], int | None]:
    """pid -> rank, and the world size, from a run directory's run.json."""
    data = read_manifest(root) if root is not None else None
    if not data:
        return {}, None
    pids = {}
    for entry in data.get("ranks") or []:
        if isinstance(entry, dict):
            rank, pid = parse_rank(entry.get("rank")), entry.get("pid")
            if rank is not None and isinstance(pid, int):
                pids[pid] = rank
    world = data.get("world_size")
    return pids, world if isinstance(world, int) and 0 < world < (1 << 16) else None


def cores_of_run(root: Path) -> list[str]:
    """The cores `mldebug run --core-dumps` kept in <run>/cores/; none there and the run's
    cores went to a handler: an error that says which command gets them."""
    folder = root / "cores"
    try:
        names = sorted(n for n in os.listdir(folder) if n.endswith(".core"))
    except OSError:
        names = []
    if names:
        return [str(folder / n) for n in names[:MAX_CORES]]
    data = read_manifest(root) or {}
    fetches = [
        entry["core"].get("fetch")
        for entry in data.get("ranks") or []
        if isinstance(entry, dict) and isinstance(entry.get("core"), dict)
    ]
    fetches = [f for f in fetches if isinstance(f, str)]
    if fetches:
        raise NoTargetError(
            f"no core file in {folder}: the kernel piped them to a handler",
            "\n".join(fetches[:8]),
        )
    plan = core_plan()
    hint = plan.explain() if plan.piped else "rerun the job with: mldebug run --core-dumps ..."
    raise NoTargetError(f"no core file in {folder}", hint)


def _rank_of(path: str, info: CoreInfo, pids: dict[int, int], used: set[int]) -> int:
    by_pid = pids.get(info.pid) if info.pid is not None else None
    for rank in (by_pid, info.rank, rank_from_name(path)):
        if rank is not None and rank not in used:
            return rank
    rank = 0
    while rank in used:
        rank += 1
    return rank


def _check_mapped(path: str, exe: str, info: CoreInfo) -> None:
    """The core names the executable it ran: another one cannot explain it."""
    mapped = info.executable
    if mapped and os.path.realpath(mapped) != os.path.realpath(exe):
        raise MldebugError(
            f"{path} does not match {exe}: the crashed process ran {mapped}",
            f"Pass the interpreter it ran: --exe {mapped}",
        )


def _check_match(path: str, exe: str, gdb_words: str) -> None:
    """gdb's own check (the build id): the same path, another build."""
    if "core file may not match specified executable" in gdb_words:
        raise MldebugError(
            f"{path} does not match {exe} (gdb: core file may not match specified executable)",
            "Pass the interpreter the crashed rank ran (--exe PYTHON), the same build.",
        )


def observe_cores(
    paths: list[str], exe: str | None = None, run_dir: str | None = None, timeout: float = 120.0
) -> tuple[JobSnapshot, tuple[NativeDump, ...]]:
    """One snapshot from core files (one per rank), and what gdb read in each."""
    gdb = gdbs.find_gdb()
    root = Path(run_dir) if run_dir else None
    if root is None and paths and Path(paths[0]).parent.name == "cores":
        root = Path(paths[0]).parent.parent  # <run>/cores/rank1.123.core
    pids, world = _run_ranks(root)
    dumps: list[NativeDump] = []
    targets: list[RankTarget] = []
    samples: dict[int, tuple[StackSample, ...]] = {}
    used: set[int] = set()
    for path in paths[:MAX_CORES]:
        try:
            info = core_info(path)
        except NotACoreError as error:
            raise MldebugError(f"{path} is not a core file: {error}") from None
        except OSError as error:
            if error.errno == errno.ELOOP:
                raise MldebugError(
                    f"{path} is a symbolic link: mldebug does not follow links",
                    "Give the core file itself: realpath " + path,
                ) from None
            raise NoTargetError(f"cannot read the core file {path}: {error.strerror}") from None
        executable = exe or info.executable
        if not executable or not os.path.isfile(executable):
            raise MldebugError(
                f"{path}: the executable it ran ({executable or 'unknown'}) is not here",
                "Pass the Python interpreter the rank ran: --exe PYTHON",
            )
        _check_mapped(path, executable, info)
        rank = _rank_of(path, info, pids, used)
        used.add(rank)
        dump, words = gdbs.read_core(gdb, path, executable, rank, timeout)
        _check_match(path, executable, words)
        if world is None and info.environment.get("WORLD_SIZE", "").isdigit():
            world = int(info.environment["WORLD_SIZE"])
        dump = replace(dump, pid=info.pid, signal=dump.signal or info.signal_name)
        dump = replace(
            dump,
            threads=tuple(
                replace(t, python_name="MainThread") if t.lwp == info.pid and t.python_frames else t
                for t in dump.threads
            ),
        )
        if info.crashed_tid and not any(t.crashed for t in dump.threads):
            dump = replace(
                dump,
                threads=tuple(replace(t, crashed=t.lwp == info.crashed_tid) for t in dump.threads),
            )
        dumps.append(placed(dump))
        pid = info.pid or -(len(targets) + 1)
        target = RankTarget(pid=pid, rank=rank, world_size=world, cmdline=info.command)
        targets.append(target)
        threads = tuple(
            ThreadStack(thread_id=lwp, name=name, frames=frames, os_thread_id=lwp)
            for lwp, name, frames in python_threads(dump, pid)
        )
        when = info.mtime
        if threads:
            # A dead rank's stack never moves: read twice, idle, it counts as waiting.
            samples[pid] = (
                StackSample(target, when, threads),
                StackSample(target, when + 1, threads),
            )
        else:
            samples[pid] = (
                StackSample(target, when, failure=FAIL_ERROR, failure_detail="no Python frames"),
            )
    look = see_job(targets, samples, world, run_dir=str(root) if root else None, partial=True)
    return core_verdict(look, dumps), tuple(dumps)
