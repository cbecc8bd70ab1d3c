"""Which processes to look at: resolve `--pid`, `--run DIR` or nothing into rank targets.

A pid may be a rank or a launcher (torchrun, `mldebug run`, accelerate, deepspeed, srun):
a launcher expands to the descendants that carry rank environment, keeping only the topmost
process per rank so DataLoader workers and other children that inherited a rank's
environment are not taken for ranks. Rank, world size and host come from each process's
environment, read through psutil.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import psutil

from mldebug import rundir
from mldebug.collect.crashes import read_crashes
from mldebug.errors import NoTargetError, PermissionDeniedError
from mldebug.model import RankCrash, RankTarget
from mldebug.ranges import format_ranks

# (rank variable, world size variable, local rank variable), most specific launcher first.
RANK_ENV_SCHEMES = (
    ("RANK", "WORLD_SIZE", "LOCAL_RANK"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
    ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
    ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"),
)
# Variables whose values together name one job (so two jobs on a machine stay apart).
JOB_KEY_ENV = (
    "MLDEBUG_RUN_DIR",
    "TORCHELASTIC_RUN_ID",
    "MASTER_ADDR",
    "MASTER_PORT",
    "SLURM_JOB_ID",
    "OMPI_MCA_orte_hnp_uri",
    "PMI_PORT",
)


@dataclass(frozen=True)
class JobTargets:
    """The ranks of one job, as found."""

    targets: tuple[RankTarget, ...]
    world_size: int | None = None
    job: str = ""
    run_dir: str | None = None
    exit_codes: dict[int, int] = field(default_factory=dict)  # rank -> code, from run.json
    notes: tuple[str, ...] = ()  # what resolution noticed and the user should know
    partial: bool = False  # the user named some ranks only: the others are not "missing"
    crashes: tuple[RankCrash, ...] = ()  # ranks that ended badly, from the run directory


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value not in (None, "") else None
    except ValueError:
        return None


# Bounds on numbers read from run-directory files: beyond them a value is garbage, and a pid
# too large for the kernel's pid_t would make os.kill raise instead of answering.
PID_MAX = 1 << 22  # Linux's PID_MAX_LIMIT
MAX_WORLD_SIZE = 1 << 20


def _pid(value: object) -> int | None:
    pid = _int(str(value or ""))
    return pid if pid is not None and 0 < pid <= PID_MAX else None


def _world(value: object) -> int | None:
    size = _int(str(value or ""))
    return size if size is not None and 0 < size <= MAX_WORLD_SIZE else None


def rank_env(environ: dict[str, str]) -> tuple[int | None, int | None, int | None]:
    """(rank, world size, local rank) from a process environment, or Nones."""
    for rank_var, size_var, local_var in RANK_ENV_SCHEMES:
        rank = _int(environ.get(rank_var))
        if rank is not None:
            return rank, _int(environ.get(size_var)), _int(environ.get(local_var))
    return None, None, None


def job_key(environ: dict[str, str]) -> str:
    # torchrun's default run id "none" is shared by every job: it tells nothing apart.
    parts = [
        f"{name}={environ[name]}"
        for name in JOB_KEY_ENV
        if environ.get(name) and environ[name] != "none"
    ]
    return " ".join(parts)


def _environ(proc: psutil.Process) -> dict[str, str] | None:
    try:
        return proc.environ()
    except (psutil.Error, OSError):
        return None


def _cmdline(proc: psutil.Process) -> str:
    try:
        return " ".join(proc.cmdline())
    except (psutil.Error, OSError):
        return ""


def target_from_process(
    proc: psutil.Process, environ: dict[str, str] | None = None, host: str | None = None
) -> RankTarget:
    environ = _environ(proc) if environ is None else environ
    rank, world, local = rank_env(environ or {})
    return RankTarget(
        pid=proc.pid,
        rank=rank,
        world_size=world,
        local_rank=local,
        host=host or rundir.hostname(),
        job=job_key(environ or {}),
        cmdline=_cmdline(proc),
        run_dir=(environ or {}).get("MLDEBUG_RUN_DIR"),
    )


def check_pid(pid: int) -> None:
    """Raise a clear error for a pid that is not there or is not ours (signal 0 probes it)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        raise NoTargetError(
            f"no process with pid {pid}", "Check the pid with `ps -ef | grep python`."
        ) from None
    except PermissionError:
        raise PermissionDeniedError(
            f"pid {pid} belongs to another user",
            "mldebug only reads your own processes; run it as that user.",
        ) from None
    except OSError as error:
        if error.errno == errno.EINVAL:
            raise NoTargetError(f"bad pid {pid}") from None
        raise


def select_ranks(
    candidates: list[tuple[psutil.Process, dict[str, str]]],
) -> list[tuple[psutil.Process, dict[str, str]]]:
    """Keep the topmost process per (job, rank); drop launchers that carry rank env too.

    A DataLoader worker inherits its rank's environment, so it looks like a second copy of
    that rank: it is dropped because an ancestor has the same job and rank. A launcher started
    inside an allocation (srun with SLURM_PROCID=0) has descendants of other ranks: dropped too.
    """
    parents: dict[int, int] = {}
    keys: dict[int, tuple[str, int | None]] = {}
    for proc, environ in candidates:
        try:
            parents[proc.pid] = proc.ppid()
        except psutil.Error:
            continue
        keys[proc.pid] = (job_key(environ), rank_env(environ)[0])

    def ancestors(pid: int):
        ancestor, hops = parents.get(pid), 0
        while ancestor in keys and hops < 64:
            yield ancestor
            ancestor, hops = parents.get(ancestor), hops + 1

    launchers = {a for pid, key in keys.items() for a in ancestors(pid) if keys[a] != key}
    inherited = {
        pid
        for pid, key in keys.items()
        if any(keys[a] == key and a not in launchers for a in ancestors(pid))
    }
    return [
        (p, env)
        for p, env in candidates
        if p.pid in keys and p.pid not in inherited and p.pid not in launchers
    ]


def rank_processes_under(root: psutil.Process) -> list[tuple[psutil.Process, dict[str, str]]]:
    """Descendants of `root` (and root itself) that are ranks, topmost process per rank."""
    try:
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        procs = [root]
    candidates = []
    for proc in procs:
        environ = _environ(proc)
        if environ and rank_env(environ)[0] is not None:
            candidates.append((proc, environ))
    return select_ranks(candidates)


def discover_rank_processes() -> list[tuple[psutil.Process, dict[str, str]]]:
    """This user's processes that carry rank environment (the auto-discovery path)."""
    me = os.getuid()
    found = []
    for proc in psutil.process_iter(["uids", "pid"]):
        try:
            if proc.info["uids"] is None or proc.info["uids"].real != me or proc.pid == os.getpid():
                continue
        except (psutil.Error, KeyError):
            continue
        environ = _environ(proc)
        if environ and rank_env(environ)[0] is not None:
            found.append((proc, environ))
    return select_ranks(found)


def _job_of(targets: Sequence[RankTarget]) -> tuple[str, int | None]:
    sizes = [t.world_size for t in targets if t.world_size]
    return (targets[0].job if targets else ""), (max(sizes) if sizes else None)


def _from_pids(pids: Iterable[int]) -> JobTargets:
    targets: dict[int, RankTarget] = {}
    notes = []
    launchers = 0
    host = rundir.hostname()
    for pid in pids:
        check_pid(pid)
        try:
            proc = psutil.Process(pid)
            found = rank_processes_under(proc)
        except psutil.NoSuchProcess:
            raise NoTargetError(f"no process with pid {pid}") from None
        except psutil.AccessDenied:
            raise PermissionDeniedError(f"cannot read process {pid}") from None
        if not found:
            found = [(proc, _environ(proc) or {})]  # a plain Python process: take it as is
        elif len(found) > 1 or found[0][0].pid != pid:
            launchers += 1
            notes.append(f"pid {pid} is a launcher: looking at its {len(found)} rank processes")
        for child, environ in found:
            targets.setdefault(child.pid, target_from_process(child, environ, host))
    ordered = tuple(sorted(targets.values(), key=_order))
    job, world = _job_of(ordered)
    partial = not launchers and world is not None and len(ordered) < world
    if partial:
        notes.append(
            f"looking at the {len(ordered)} rank(s) given, of world size {world}; "
            "give the launcher's pid to see every rank"
        )
    return JobTargets(ordered, world, job, None, notes=tuple(notes), partial=partial)


def _order(target: RankTarget) -> tuple:
    return (target.rank is None, target.rank if target.rank is not None else 0, target.pid)


def _exit_codes(manifest: dict) -> dict[int, int]:
    """rank -> exit code of the ranks run.json says have ended."""
    codes: dict[int, int] = {}
    entries = manifest.get("ranks")
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict):
            continue
        rank = _int(str(entry.get("rank", "")))
        code = entry.get("exit_code", entry.get("returncode"))
        if rank is not None and isinstance(code, int):
            codes[rank] = code
    return codes


def with_run_outcome(job: JobTargets) -> JobTargets:
    """`job` with the exit codes and crashes its run directory records now.

    A live view keeps its targets once the run is over (resolving it again finds nothing to
    look at) and still has to learn how each rank ended.
    """
    manifest = rundir.read_manifest(job.run_dir) if job.run_dir else None
    if manifest is None:
        return job
    return replace(
        job, exit_codes=_exit_codes(manifest), crashes=read_crashes(job.run_dir, manifest)
    )


def _from_run_dir(run_dir: str | os.PathLike) -> JobTargets:
    root = Path(run_dir)
    manifest = rundir.read_manifest(root)
    if manifest is None:
        raise NoTargetError(
            f"{root} is not an mldebug run directory (no readable run.json)",
            "Pass the directory `mldebug run` printed, or use --pid.",
        )
    paths = rundir.RunPaths(root)
    host = rundir.hostname()
    targets: dict[int, RankTarget] = {}
    exit_codes = _exit_codes(manifest)
    world = _world(manifest.get("world_size"))
    entries = manifest.get("ranks")
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict):
            continue
        rank = _int(str(entry.get("rank", "")))
        pid = _pid(entry.get("pid"))
        if rank is not None and pid and rundir.pid_alive(pid):
            targets[rank] = RankTarget(
                pid=pid,
                rank=rank,
                world_size=world,
                local_rank=_int(str(entry.get("local_rank", ""))),
                host=str(entry.get("host") or host),
                job=str(root),
                run_dir=str(root),
            )
    for rank in paths.rank_ids():  # proc.json written by the in-rank hook
        info = rundir.read_json(paths.proc_info(rank)) or {}
        pid = _pid(info.get("pid"))
        if rank in targets or not pid or not rundir.pid_alive(pid):
            continue
        if info.get("host") and info["host"] != host:
            continue  # another node: not readable from here
        world = world or _world(info.get("world_size"))
        targets[rank] = RankTarget(
            pid=pid,
            rank=rank,
            world_size=world,
            local_rank=_int(str(info.get("local_rank", ""))),
            host=info.get("host") or host,
            job=str(root),
            run_dir=str(root),
        )
    crashes = read_crashes(root, manifest)
    if not targets:
        status = manifest.get("status") or "unknown"
        if status == rundir.STATUS_FAILED:
            # Post-mortem: no stacks to read, but the files say who failed first, and how.
            return JobTargets(
                (),
                world,
                str(root),
                str(root),
                exit_codes,
                crashes=crashes,
                notes=(f"the run has ended ({status}); this is what it left",),
            )
        raise NoTargetError(
            f"run {root} has no live ranks (status: {status})",
            "It has ended or not started yet; its logs are in that directory.",
        )
    if world is None:
        sizes = [t.world_size for t in targets.values() if t.world_size]
        world = max(sizes) if sizes else None
    ordered = tuple(sorted(targets.values(), key=_order))
    return JobTargets(ordered, world, str(root), str(root), exit_codes, crashes=crashes)


def _describe_job(targets: list[RankTarget]) -> str:
    ranks = sorted(t.rank for t in targets if t.rank is not None)
    pids = " ".join(str(t.pid) for t in targets[:4]) + (" ..." if len(targets) > 4 else "")
    label = targets[0].job or "(no job variables)"
    return f"  {label}: ranks {format_ranks(ranks)}, pids {pids}"


def _from_discovery() -> JobTargets:
    found = discover_rank_processes()
    if not found:
        raise NoTargetError(
            "found no training processes of yours to look at",
            "Start the job with `mldebug run`, or point at it: mldebug dump --pid PID "
            "(a rank's or its launcher's pid) or --run DIR.",
        )
    host = rundir.hostname()
    jobs: dict[str, list[RankTarget]] = {}
    for proc, environ in found:
        target = target_from_process(proc, environ, host)
        jobs.setdefault(target.job, []).append(target)
    if len(jobs) > 1:
        listing = "\n".join(_describe_job(sorted(t, key=_order)) for t in jobs.values())
        raise NoTargetError(
            f"found {len(jobs)} jobs; say which one to look at:\n{listing}",
            "Pick one with --pid (any of its pids, or its launcher's) or --run DIR.",
        )
    targets = tuple(sorted(next(iter(jobs.values())), key=_order))
    job, world = _job_of(targets)
    run_dir = targets[0].run_dir
    return JobTargets(targets, world, job, run_dir)


def resolve_targets(
    pids: Sequence[int] = (), run_dir: str | os.PathLike | None = None
) -> JobTargets:
    """What the user pointed at, as rank targets. Raises NoTargetError & co. with a remedy."""
    if pids:
        return _from_pids(pids)
    if run_dir is not None:
        return _from_run_dir(run_dir)
    newest = rundir.newest_live_run()
    if newest is not None:
        return _from_run_dir(newest)
    return _from_discovery()
