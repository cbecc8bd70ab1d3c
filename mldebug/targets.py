"""Which processes to look at: resolve `--pid`, `--run DIR` or nothing into rank targets.

A pid may be a rank or a launcher (torchrun, `mldebug run`, accelerate, deepspeed, srun):
a launcher expands to the descendants that carry rank environment, keeping only the topmost
process per rank so DataLoader workers and other children that inherited a rank's
environment are not taken for ranks. Rank, world size and host come from each process's
environment, read through psutil. Resolution reads run.json for pids and exit codes only:
how ranks ended (error files, the first failure) is read by the collect step
(mldebug.collect.crashes), which resolution never calls.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from mldebug.errors import NoTargetError, PermissionDeniedError
from mldebug.files import procfs, rundir, safeio
from mldebug.model import JobTargets, RankTarget
from mldebug.ranges import format_ranks
from mldebug.rankrules import rank_identity
from mldebug.textsafe import one_line

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
    """(rank, world size, local rank) from a process environment, or Nones (the rules the
    in-rank agent follows too: mldebug.rankrules)."""
    identity = rank_identity(environ)
    if identity is None:
        return None, None, None
    rank, local, world = identity
    return rank, world, local


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
    if isinstance(pid, bool) or not isinstance(pid, int) or not 0 < pid <= PID_MAX:
        # kill(0) and kill(-1) would probe a process group or every process, not a pid.
        raise NoTargetError(
            f"bad pid {pid}: a pid is a number from 1 to {PID_MAX}",
            "Check the pid with `ps -ef | grep python`.",
        )
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
    So is what else an `mldebug run` launcher started (its guardian): inside an allocation
    it carries the allocation's rank 0 as the launcher does, but not the run's directory its
    ranks carry; the run's ranks are the job's ranks.
    """
    parents: dict[int, int] = {}
    keys: dict[int, tuple[str, int | None]] = {}
    with_env: dict[int, dict[str, str]] = {}
    for proc, environ in candidates:
        try:
            parents[proc.pid] = proc.ppid()
        except psutil.Error:
            continue
        keys[proc.pid] = (job_key(environ), rank_env(environ)[0])
        with_env[proc.pid] = environ

    def ancestors(pid: int) -> Iterator[int]:
        ancestor, hops = parents.get(pid), 0
        while ancestor in keys and hops < 64:
            yield ancestor
            ancestor, hops = parents.get(ancestor), hops + 1

    launchers = {a for pid, key in keys.items() for a in ancestors(pid) if keys[a] != key}
    # An `mldebug run` launcher: the topmost process above its ranks (which carry its run
    # directory) that does not carry it; what it started without it is its own, not a rank.
    runs = {pid for pid, environ in with_env.items() if environ.get(rundir.ENV_RUN_DIR)}
    run_launchers = {a for pid in runs for a in ancestors(pid) if a not in runs}
    helpers = {
        pid for pid in keys if pid not in runs and any(a in run_launchers for a in ancestors(pid))
    }
    inherited = {
        pid
        for pid, key in keys.items()
        if any(keys[a] == key and a not in launchers for a in ancestors(pid))
    }
    dropped = inherited | launchers | helpers
    return [(p, env) for p, env in candidates if p.pid in keys and p.pid not in dropped]


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


# At most this many rank entries are taken from run.json (the rest are ignored, with a note):
# 300,000 planted ranks must not make a dump take minutes.
MAX_RANK_ENTRIES = 1 << 16


def _rank_entries(manifest: dict) -> list[dict]:
    entries = manifest.get("ranks")
    if not isinstance(entries, list):
        return []
    return [entry for entry in entries[:MAX_RANK_ENTRIES] if isinstance(entry, dict)]


def manifest_exit_codes(manifest: dict) -> dict[int, int]:
    """rank -> exit code of the ranks run.json says have ended."""
    codes: dict[int, int] = {}
    for entry in _rank_entries(manifest):
        rank = rundir.parse_rank(entry.get("rank"))
        code = entry.get("exit_code", entry.get("returncode"))
        if rank is not None and isinstance(code, int) and not isinstance(code, bool):
            if -(1 << 31) <= code < 1 << 31:
                codes[rank] = code
    return codes


def manifest_shut_down(
    root: str | os.PathLike, manifest: dict, only: Collection[int] | None = None
) -> frozenset[int]:
    """Ranks run.json lists with no exit code yet whose Python has shut down normally: their
    agent wrote exit.json at exit, naming the pid run.json gives the rank. Such a rank makes
    no further collective; its process may take a while to end (its native teardown) or to
    be reaped, and its launcher records the code only then. `only`: these ranks' files alone
    are read."""
    paths = rundir.RunPaths(Path(root))
    recorded = manifest_exit_codes(manifest)
    found = set()
    for entry in _rank_entries(manifest):
        rank, pid = rundir.parse_rank(entry.get("rank")), _pid(entry.get("pid"))
        if rank is None or not pid or rank in recorded or (only is not None and rank not in only):
            continue
        note = safeio.read_json(paths.exit_file(rank))
        if isinstance(note, dict) and _pid(note.get("pid")) == pid:
            found.add(rank)
    return frozenset(found)


def run_endings(run_dir: str | os.PathLike, host: str) -> tuple[dict[int, int], frozenset[int]]:
    """How the ranks of a run that ran on `host` have ended so far, as its run.json and
    their agents' exit.json say: (rank -> exit code, ranks whose Python shut down). Nothing
    where the run has no readable run.json."""
    manifest = rundir.read_manifest(run_dir)
    if not isinstance(manifest, dict):
        return {}, frozenset()
    here = set()
    for entry in _rank_entries(manifest):
        rank = rundir.parse_rank(entry.get("rank"))
        if rank is not None and _here(entry.get("host"), host):
            here.add(rank)
    codes = {r: c for r, c in manifest_exit_codes(manifest).items() if r in here}
    return codes, manifest_shut_down(run_dir, manifest) & here


@dataclass
class _RunDirReader:
    """Which pids a run directory names are its ranks: a pid is only read (ptraced) once it
    is verified as one: alive, owned by the directory's owner, and started with
    MLDEBUG_RUN_DIR naming this same directory and a rank variable (RANK...), which its
    launcher lacks. Files in the directory are only claims.

    A process whose environment cannot be read (a non-dumpable one: PR_SET_DUMPABLE 0, a
    setuid start) is verified by descent instead: its start time is the one its agent wrote
    in proc.json (so a reused pid does not pass), and /proc/PID/stat's parents lead to the
    `mldebug run` process run.json names, started at the time run.json gives."""

    root: Path
    owner: int
    launcher: tuple[int, int] | None = None  # (pid, start ticks) of the run's `mldebug run`
    ticks: dict[int, int] = field(default_factory=dict)  # pid -> start ticks its agent wrote
    verified: dict[int, dict[str, str] | None] = field(default_factory=dict)
    strangers: set[int] = field(default_factory=set)  # alive, named, not verified
    # Named, the launcher's own, and with no environment yet: a process reads so for a
    # moment after exec, and run.json names each rank as it is spawned.
    starting: set[int] = field(default_factory=set)

    def environ(self, pid: int) -> dict[str, str] | None:
        """The environment of `pid` if it is a rank of this run, else None (cached); {} for
        a rank verified by descent, whose environment cannot be read."""
        if pid not in self.verified:
            self.verified[pid] = self._verify(pid)
            if self.verified[pid] is None and pid not in self.starting and procfs.pid_alive(pid):
                self.strangers.add(pid)
        return self.verified[pid]

    def _verify(self, pid: int) -> dict[str, str] | None:
        if not procfs.pid_alive(pid) or procfs.proc_uids(pid) != (self.owner, self.owner):
            return None
        environ = procfs.proc_environ(pid)
        if environ is None:
            return {} if self._descends(pid) else None
        if not environ and self.launcher is not None and procfs.descends_from(pid, *self.launcher):
            self.starting.add(pid)
            return None
        if not rundir.same_dir(environ.get(rundir.ENV_RUN_DIR), self.root):
            return None
        return environ if rank_env(environ)[0] is not None else None  # not the launcher

    def _descends(self, pid: int) -> bool:
        ticks = self.ticks.get(pid)
        if self.launcher is None or ticks is None or procfs.proc_start_ticks(pid) != ticks:
            return False
        return procfs.descends_from(pid, *self.launcher)


def _launcher_of(manifest: dict) -> tuple[int, int] | None:
    """The `mldebug run` process of a run, by pid and start time (run.json), if recorded."""
    pid, ticks = _pid(manifest.get("mldebug_pid")), manifest.get("mldebug_start_ticks")
    if pid is None or not isinstance(ticks, int) or isinstance(ticks, bool):
        return None
    return pid, ticks


def _pid_list(pids: set[int]) -> str:
    """'pid 11 12 ...': the first 8 of `pids`, for a note."""
    more = " ..." if len(pids) > 8 else ""
    return "pid " + " ".join(str(pid) for pid in sorted(pids)[:8]) + more


def _here(value: object, host: str) -> bool:
    """Is a rank entry's host this machine (an entry without one is taken as local)?"""
    return not value or value == host


def _trust_notes(root: Path) -> tuple[int, list[str]]:
    """The uid whose processes a run directory may name, and what to say about it."""
    try:
        info = os.stat(root)
    except OSError as error:
        raise NoTargetError(f"cannot read the run directory {root}: {error.strerror}") from None
    if info.st_uid != os.geteuid():
        return info.st_uid, [
            f"{root} belongs to uid {info.st_uid}, not you: only that user's processes "
            "that run with this directory are read"
        ]
    if info.st_mode & 0o022:
        return info.st_uid, [
            f"{root} is writable by others (mode {info.st_mode & 0o777:o}): anyone may have "
            "planted its files; only processes verified as its ranks are read"
        ]
    return info.st_uid, []


def _from_run_dir(run_dir: str | os.PathLike) -> JobTargets:
    root = Path(run_dir)
    manifest = rundir.read_manifest(root)
    if manifest is None:
        raise NoTargetError(
            f"{root} is not an mldebug run directory (no readable run.json)",
            "Pass the directory `mldebug run` printed, or use --pid.",
        )
    paths = rundir.RunPaths(root)
    owner, notes = _trust_notes(root)
    host = rundir.hostname()
    reader = _RunDirReader(root, owner, _launcher_of(manifest))
    exit_codes = manifest_exit_codes(manifest)
    shut_down = manifest_shut_down(root, manifest)
    world = _world(manifest.get("world_size"))
    entries = manifest.get("ranks")
    if isinstance(entries, list) and len(entries) > MAX_RANK_ENTRIES:
        notes.append(
            f"run.json lists {len(entries)} ranks: only the first {MAX_RANK_ENTRIES} are read"
        )
    # What the files claim, run.json first: (rank, pid, local rank, world size).
    claims: list[tuple[int, int, object, object]] = []
    for entry in _rank_entries(manifest):
        rank, pid = rundir.parse_rank(entry.get("rank")), _pid(entry.get("pid"))
        if rank is not None and pid and _here(entry.get("host"), host):
            claims.append((rank, pid, entry.get("local_rank"), None))
    for rank in paths.rank_ids()[:MAX_RANK_ENTRIES]:  # proc.json written by the in-rank hook
        info = safeio.read_json(paths.proc_info(rank)) or {}
        pid = _pid(info.get("pid"))
        if pid and _here(info.get("host"), host):  # another node's pid: not readable here
            claims.append((rank, pid, info.get("local_rank"), info.get("world_size")))
            ticks = info.get("start_ticks")
            if isinstance(ticks, int) and not isinstance(ticks, bool):
                reader.ticks.setdefault(pid, ticks)
    # One target per rank and per pid (500 ranks naming one process read it once): the
    # rank the process's own environment gives wins, else the first claim.
    by_pid: dict[int, list[tuple[int, int, object, object]]] = {}
    for claim in claims:
        by_pid.setdefault(claim[1], []).append(claim)
    targets: dict[int, RankTarget] = {}
    for pid, named in by_pid.items():
        environ = reader.environ(pid)
        if environ is None:
            continue
        own = rank_env(environ)[0]
        free = [claim for claim in named if claim[0] not in targets]
        if not free:
            continue
        rank, _, local, size = next((c for c in free if c[0] == own), free[0])
        world = world or _world(size)
        targets[rank] = RankTarget(
            pid=pid,
            rank=rank,
            world_size=world,
            local_rank=rundir.parse_rank(local),
            host=host,
            job=str(root),
            run_dir=str(root),
        )
    if reader.starting:
        notes.append(
            f"{len(reader.starting)} process(es) of the run are still starting (no environment "
            f"yet, as for a moment after exec; the next look reads them): "
            f"{_pid_list(reader.starting)}"
        )
    if reader.strangers:
        notes.append(
            f"not reading {len(reader.strangers)} process(es) the run directory names that "
            f"are not its ranks (not started with MLDEBUG_RUN_DIR={root}, or another "
            f"user's): {_pid_list(reader.strangers)}"
        )
    if not targets:
        status = manifest.get("status") or "unknown"
        status = status if isinstance(status, str) else "unknown"
        if status == rundir.STATUS_FAILED:
            # Post-mortem: no stacks to read, but the files say who failed first, and how.
            return JobTargets(
                (),
                world,
                str(root),
                str(root),
                exit_codes,
                notes=(*notes, f"the run has ended ({status}); this is what it left"),
                shut_down=shut_down,
            )
        reason = manifest.get("reason")  # why it was interrupted, as the guardian wrote it
        said = f"; {one_line(reason[:200])}" if isinstance(reason, str) and reason else ""
        raise NoTargetError(
            "\n".join([f"run {root} has no live ranks (status: {status[:40]}{said})", *notes]),
            "It has ended or not started yet; its logs are in that directory.",
        )
    if world is None:
        sizes = [t.world_size for t in targets.values() if t.world_size]
        world = max(sizes) if sizes else None
    ordered = tuple(sorted(targets.values(), key=_order))
    return JobTargets(
        ordered, world, str(root), str(root), exit_codes, notes=tuple(notes), shut_down=shut_down
    )


def describe_job(targets: list[RankTarget]) -> str:
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
        listing = "\n".join(describe_job(sorted(t, key=_order)) for t in jobs.values())
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
