"""What SLURM says of a job, and the one `srun` that runs `mldebug collect` on its nodes.

The collector step joins the running job: `--overlap` (without it the step waits for CPUs
the job's own steps hold, and never starts), one task per node, no GPU and no memory
claimed, a time limit. Which node holds which ranks, when a node does not answer, comes
from the job's largest step (`scontrol show step`: its nodes, task count and layout).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass

from mldebug.cluster.hostlist import expand
from mldebug.errors import MldebugError, NoTargetError, ToolMissingError
from mldebug.textsafe import one_line

QUERY_TIMEOUT = 20.0  # seconds for one squeue/scontrol/sinfo
SLURM_REMEDY = "Run it where the SLURM commands work (a login node of the cluster)."


@dataclass(frozen=True)
class SlurmJob:
    job: str
    state: str  # RUNNING, PENDING...
    nodes: tuple[str, ...]
    # node -> the global task ids (ranks) of the job's main step there, when SLURM's
    # layout tells them (block distribution of an even task count)
    ranks: dict[str, tuple[int, ...]]
    tasks: int | None = None


def _run(argv: Sequence[str], env: dict | None = None) -> str:
    try:
        done = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            errors="replace",
            timeout=QUERY_TIMEOUT,
            env=env,
            stdin=subprocess.DEVNULL,
        )
    except FileNotFoundError:
        raise ToolMissingError(f"{argv[0]} is not installed here", SLURM_REMEDY) from None
    except subprocess.TimeoutExpired:
        raise MldebugError(
            f"{argv[0]} did not answer within {QUERY_TIMEOUT:g} s", "Is slurmctld up?"
        ) from None
    if done.returncode != 0:
        said = one_line(done.stderr.strip()[:300]) or f"exit code {done.returncode}"
        raise NoTargetError(f"{' '.join(argv[:3])}: {said}", SLURM_REMEDY)
    return done.stdout


def _steps(job: str, env: dict | None) -> list[dict[str, str]]:
    text = _run(["scontrol", "-o", "show", "step", job], env)
    steps = []
    for line in text.splitlines():
        fields = dict(re.findall(r"(\w+)=(\S*)", line))
        if fields.get("StepId", "").split(".")[-1].isdigit():
            steps.append(fields)
    return steps


def _layout(step: dict[str, str]) -> dict[str, tuple[int, ...]]:
    """node -> ranks for a block-distributed step whose tasks split evenly over its nodes."""
    try:
        nodes = expand(step.get("NodeList", ""))
        tasks = int(step.get("Tasks", ""))
    except ValueError:
        return {}
    if not nodes or tasks % len(nodes) or not step.get("Dist", "Block").startswith("Block"):
        return {}
    each = tasks // len(nodes)
    return {node: tuple(range(i * each, (i + 1) * each)) for i, node in enumerate(nodes)}


def slurm_job(job: str, env: dict | None = None) -> SlurmJob:
    """The job's state, nodes and (where SLURM's layout says) each node's ranks."""
    gone = NoTargetError(
        f"SLURM job {job} is not in the queue: it has ended, or the id is wrong",
        "`squeue --me` lists your jobs.",
    )
    try:
        line = _run(["squeue", "-h", "-j", job, "-o", "%T|%N"], env).strip()
    except NoTargetError as error:
        if "Invalid job id" in error.message:
            raise gone from None
        raise
    if not line:
        raise gone
    state, _, nodelist = line.splitlines()[0].partition("|")
    if state != "RUNNING":
        raise NoTargetError(
            f"SLURM job {job} is {one_line(state)[:40]}: it has no running tasks to read",
            "Wait until squeue shows it RUNNING.",
        )
    try:
        nodes = tuple(expand(nodelist))
    except ValueError as error:
        raise NoTargetError(f"squeue gave a node list mldebug cannot read: {error}") from None
    steps = _steps(job, env)
    main = max(steps, key=lambda s: int(s.get("Tasks", "0") or 0), default=None)
    tasks = int(main["Tasks"]) if main and main.get("Tasks", "").isdigit() else None
    return SlurmJob(job, state, nodes, _layout(main) if main else {}, tasks)


def node_states(nodes: Sequence[str], env: dict | None = None) -> dict[str, str]:
    """node -> "state (reason)" as sinfo says; empty when sinfo cannot tell."""
    try:
        text = _run(["sinfo", "-h", "-N", "-n", ",".join(nodes), "-o", "%N|%T|%E"], env)
    except MldebugError:
        return {}
    states = {}
    for line in text.splitlines():
        node, _, rest = line.partition("|")
        state, _, reason = rest.partition("|")
        states[node] = state + (f" ({reason})" if reason and reason != "none" else "")
    return states


def srun_collect(job: SlurmJob, collect: Sequence[str], minutes: int) -> list[str]:
    """The srun command line that runs `collect` once on every node of the job."""
    count = str(len(job.nodes))
    return [
        "srun",
        "--overlap",
        f"--jobid={job.job}",
        f"--nodes={count}",
        f"--ntasks={count}",
        "--ntasks-per-node=1",
        "--gres=none",
        "--mem=0",
        f"--time={minutes}",
        "--kill-on-bad-exit=0",
        "--quiet",
        "--job-name=mldebug-collect",
        *collect,
    ]
