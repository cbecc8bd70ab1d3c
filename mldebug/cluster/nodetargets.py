"""This node's rank processes for `mldebug collect`: the discovery of `mldebug dump` (this
user's processes that carry rank environment), narrowed to one SLURM job or one run.

Inside a SLURM job the batch script and the `srun` it runs carry SLURM_PROCID=0 and the
job's id too, but no step: the tasks `srun` started (the ranks) are the processes with a
SLURM_STEP_ID. The step `mldebug collect` itself runs in is left out.
"""

from __future__ import annotations

import os

from mldebug import rundir
from mldebug.errors import NoTargetError
from mldebug.model import JobTargets
from mldebug.targets import discover_rank_processes, target_from_process


def _order(target) -> tuple:
    return (target.rank is None, target.rank or 0, target.pid)


def node_targets(slurm_job: str | None = None, run: str | None = None) -> JobTargets:
    """The ranks on this node (of one SLURM job, or of one `mldebug run` directory, given
    by its path or its name), as one job. NoTargetError when there are none."""
    found = discover_rank_processes()
    if slurm_job is not None:
        own_step = os.environ.get("SLURM_STEP_ID") if os.environ.get("SLURM_JOB_ID") else None
        found = [(p, e) for p, e in found if e.get("SLURM_JOB_ID") == slurm_job]
        tasks = [(p, e) for p, e in found if e.get("SLURM_STEP_ID") not in (None, own_step)]
        found = tasks or [(p, e) for p, e in found if "SLURM_STEP_ID" not in e]
    if run is not None:
        found = [
            (p, e)
            for p, e in found
            if (e.get("MLDEBUG_RUN_DIR") or "\0") in (run, os.path.abspath(run))
            or os.path.basename((e.get("MLDEBUG_RUN_DIR") or "").rstrip("/")) == run
        ]
    if not found:
        what = f" of SLURM job {slurm_job}" if slurm_job else f" of run {run}" if run else ""
        raise NoTargetError(f"no rank processes{what} on this node")
    host = rundir.hostname()
    targets = tuple(sorted((target_from_process(p, e, host) for p, e in found), key=_order))
    sizes = [t.world_size for t in targets if t.world_size]
    jobs = sorted({t.job for t in targets})
    notes = (f"{len(jobs)} jobs on this node; give --slurm-job or --run",) if len(jobs) > 1 else ()
    # The node holds some ranks of the job: the others are elsewhere, not missing.
    return JobTargets(
        targets,
        max(sizes) if sizes else None,
        jobs[0] if jobs else "",
        targets[0].run_dir,
        notes=notes,
        partial=True,
    )
