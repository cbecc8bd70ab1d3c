"""This node's rank processes for `mldebug collect`: the discovery of `mldebug dump` (this
user's processes that carry rank environment), narrowed to one SLURM job or one run.

Inside a SLURM job the batch script and the `srun` it runs carry SLURM_PROCID=0 and the
job's id too, but no step: the tasks `srun` started (the ranks) are the processes with a
SLURM_STEP_ID. The step `mldebug collect` itself runs in is left out, and so is any other
collector a front end started (they carry MLDEBUG_COLLECTOR). An `mldebug run` launched in
the batch script (or a step) and its guardian carry the job's rank 0 too: they are no ranks
(targets.select_ranks); the run's ranks are the job's ranks here.

In a Kubernetes pod (`--pod HOSTNAME`, what `dump --k8s` passes) only the processes whose
HOSTNAME is the pod's count: the container runtime puts it in every container's
environment, and a collector that sees more than its pod (hostPID, a debug container in
the node's process namespace) must not take another pod's ranks for its own.
"""

from __future__ import annotations

import os

from mldebug.errors import NoTargetError
from mldebug.files import rundir
from mldebug.model import JobTargets, RankTarget
from mldebug.targets import (
    describe_job,
    discover_rank_processes,
    run_endings,
    target_from_process,
)


def _order(target: RankTarget) -> tuple:
    return (target.rank is None, target.rank or 0, target.pid)


COLLECTOR_MARK = "MLDEBUG_COLLECTOR"  # in the environment of `collect` started by a front end


def _slurm_tasks(found: list) -> list:
    """Of each SLURM job's processes, the tasks of its steps (not the batch script and the
    srun it runs, which carry SLURM_PROCID too) when it has any; never the step this
    collector runs in."""
    own = (os.environ.get("SLURM_JOB_ID"), os.environ.get("SLURM_STEP_ID"))
    stepped = {e.get("SLURM_JOB_ID") for _, e in found if e.get("SLURM_STEP_ID") is not None}
    kept = []
    for proc, environ in found:
        job, step = environ.get("SLURM_JOB_ID"), environ.get("SLURM_STEP_ID")
        if job is None or ((job, step) != own and (step is not None or job not in stepped)):
            kept.append((proc, environ))
    return kept


def node_targets(
    slurm_job: str | None = None, run: str | None = None, pod: str | None = None
) -> JobTargets:
    """The ranks on this node (of one SLURM job, of one `mldebug run` directory, given
    by its path or its name, or of one pod), as one job. NoTargetError when none."""
    found = [(p, e) for p, e in discover_rank_processes() if COLLECTOR_MARK not in e]
    found = _slurm_tasks(found)
    if slurm_job is not None:
        found = [(p, e) for p, e in found if e.get("SLURM_JOB_ID") == slurm_job]
    if run is not None:
        found = [
            (p, e)
            for p, e in found
            if (e.get("MLDEBUG_RUN_DIR") or "\0") in (run, os.path.abspath(run))
            or os.path.basename((e.get("MLDEBUG_RUN_DIR") or "").rstrip("/")) == run
        ]
    if pod is not None:
        found = [(p, e) for p, e in found if e.get("HOSTNAME") == pod]
    if not found:
        what = f" of SLURM job {slurm_job}" if slurm_job else f" of run {run}" if run else ""
        what += f" in pod {pod}" if pod is not None else ""
        raise NoTargetError(f"no rank processes{what} on this node")
    host = rundir.hostname()
    targets = tuple(sorted((target_from_process(p, e, host) for p, e in found), key=_order))
    sizes = [t.world_size for t in targets if t.world_size]
    jobs = sorted({t.job for t in targets})
    if len(jobs) > 1:
        listing = "\n".join(describe_job([t for t in targets if t.job == job]) for job in jobs)
        raise NoTargetError(
            f"{len(jobs)} jobs on this node:\n{listing}",
            "Say which: --slurm-job JOBID or --run DIR (dump: --slurm JOBID, --run).",
        )
    # The node holds some ranks of the job: the others are elsewhere, not missing; those of
    # its `mldebug run` that ended here are said as its run.json says (an exit code 0 is no
    # rank gone missing).
    run_dirs = {t.run_dir for t in targets}
    codes: dict[int, int] = {}
    shut_down: frozenset[int] = frozenset()
    if len(run_dirs) == 1 and targets[0].run_dir:
        codes, shut_down = run_endings(targets[0].run_dir, host)
        live = {t.rank for t in targets}
        codes = {r: c for r, c in codes.items() if r not in live}
        shut_down = shut_down - live
    return JobTargets(
        targets,
        max(sizes) if sizes else None,
        jobs[0] if jobs else "",
        targets[0].run_dir,
        codes,
        shut_down=shut_down,
        partial=True,
    )
