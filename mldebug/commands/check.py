"""`mldebug check`: the preflight tests of a distributed job, judged for the outlier.

mldebug check [--nproc-per-node N] [options]             N ranks here, as `mldebug run`
mldebug check --slurm JOBID [--nproc-per-node N]         one srun step in the job's allocation
mldebug check --hosts LIST [--nproc-per-node N]          one ssh session per rank
mldebug check [options] -- COMMAND...                    your launcher starts the ranks

Every rank runs mldebug/preflight/rank.py through `mldebug run`'s launcher (its run
directory, logs and process handling); the results are read back from what the ranks
printed (collect/checklines.py), judged (analysis/check.py), rendered (report/check.py) and
kept in the run directory as check.json and reports/check.txt.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from mldebug.analysis.check import check_verdict
from mldebug.collect.checklines import read_run
from mldebug.commands.common import command_parser, count, seconds, write_out
from mldebug.errors import EXIT_FINDINGS, EXIT_OK, MldebugError
from mldebug.files import safeio
from mldebug.files.rundir import MANIFEST, RunPaths, create_run_dir
from mldebug.files.safeio import UntrustedDirError, make_private_dir
from mldebug.launch import env as envs
from mldebug.launch.spec import LaunchSpec
from mldebug.launch.supervisor import Supervisor
from mldebug.model import SEVERITY_INFO, Finding
from mldebug.preflight import wire
from mldebug.report.check import render_text, to_json

DESCRIPTION = """\
Run the preflight tests on every rank of a job and name the outlier: can every rank join
the process group (a barrier, a small all_reduce, a ring of send/recv), what bus bandwidth
do all_reduce, all_gather and reduce_scatter reach (and each pair of nodes), and what
matmul TFLOPS does each rank's device reach. A rank that cannot join is named with what it
printed and the likely cause; the others are still measured. On a machine without a GPU
the CPU variants run (gloo, fp32).
"""

EPILOG = """\
examples:
  mldebug check --nproc-per-node 8
  mldebug check --slurm 123456 --nproc-per-node 4
  mldebug check --hosts 'gpu[017-024]' --nproc-per-node 8
  mldebug check -- torchrun --nproc-per-node 8 -m mldebug.preflight.rank

exit status:
  0    every rank joined; no slow device, no slow link
  1    a failure or an outlier was found
  2    bad command line
  3    the SLURM job is not there
  70   internal error: a bug in mldebug
"""

RANK_PROGRAM = [sys.executable, "-m", "mldebug.preflight.rank"]
RESULT_FILE = "check.json"
SLURM_STRIPPED = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR")


def build_parser():
    parser = command_parser("check", DESCRIPTION, EPILOG)
    parser.add_argument(
        "--nproc-per-node",
        "--nproc_per_node",
        type=count(1, 1024),
        metavar="N",
        help="ranks per node (default: here, 2; under --slurm, the job's tasks per node)",
    )
    parser.add_argument("--master-addr", default="127.0.0.1", metavar="ADDR")
    parser.add_argument("--master-port", type=count(1, 65535), metavar="PORT")
    parser.add_argument("--run-dir", metavar="DIR", help="where to keep logs and results")
    parser.add_argument(
        "--slurm", metavar="JOBID", help="run as one step in this SLURM job's allocation"
    )
    parser.add_argument(
        "--hosts",
        metavar="HOSTLIST",
        help="start the ranks on these hosts over ssh (node[01-04] or a,b,c; "
        "$MLDEBUG_SSH_OPTIONS adds ssh options), --nproc-per-node on each",
    )
    parser.add_argument(
        "--srun-option",
        action="append",
        default=[],
        metavar="OPT",
        help="with --slurm: an option for the check's srun step, e.g. "
        "--srun-option=--gpus-per-task=1 on a GPU allocation (repeatable)",
    )
    parser.add_argument(
        "--time-limit",
        type=seconds(5, 3600),
        default=60.0,
        metavar="S",
        help="stop every rank after S seconds, and report what was measured (default 60)",
    )
    parser.add_argument(
        "--join-timeout",
        type=seconds(1, 600),
        default=20.0,
        metavar="S",
        help="how long the group waits for ranks to join before going on without them (default 20)",
    )
    parser.add_argument(
        "--compute-seconds",
        type=seconds(0.5, 120),
        default=4.0,
        metavar="S",
        help="each dtype's matmul window on every rank (default 4)",
    )
    parser.add_argument(
        "--bandwidth-seconds",
        type=seconds(0.5, 120),
        default=None,
        metavar="S",
        help="the collectives' window, all ops and sizes together "
        "(default: an eighth of --time-limit, 2 to 10)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "command",
        nargs="*",
        help="-- COMMAND...: a launcher that starts `python -m mldebug.preflight.rank` itself",
    )
    return parser


def _bandwidth_seconds(args) -> float:
    if args.bandwidth_seconds is not None:
        return args.bandwidth_seconds
    return max(2.0, min(10.0, args.time_limit / 8))


def _limits(args) -> dict[str, str]:
    op_timeout = max(10.0, min(60.0, args.time_limit / 3))
    return {
        wire.ENV_JOIN_TIMEOUT: str(args.join_timeout),
        wire.ENV_OP_TIMEOUT: str(op_timeout),
        wire.ENV_COMPUTE_SECONDS: str(args.compute_seconds),
        wire.ENV_BANDWIDTH_SECONDS: str(_bandwidth_seconds(args)),
        # NCCL says which transport it picked; where NCCL is not used nothing is written.
        "NCCL_DEBUG_SUBSYS": os.environ.get("NCCL_DEBUG_SUBSYS", "INIT,NET"),
    }


def _slurm_launch(args, env: dict[str, str]) -> tuple[list[str], dict[str, str], int]:
    from mldebug.cluster import slurm
    from mldebug.cluster.front import outside_allocation

    job = slurm.slurm_job(args.slurm)
    per_node = args.nproc_per_node
    if per_node is None and job.tasks and job.tasks % len(job.nodes) == 0:
        per_node = job.tasks // len(job.nodes)
    per_node = per_node or 1
    minutes = max(1, int(args.time_limit // 60) + 2)
    argv = [
        "srun",
        "--overlap",
        f"--jobid={job.job}",
        f"--nodes={len(job.nodes)}",
        f"--ntasks={len(job.nodes) * per_node}",
        f"--ntasks-per-node={per_node}",
        "--overcommit",
        "--mem=0",
        f"--time={minutes}",
        "--kill-on-bad-exit=0",
        "--quiet",
        "--job-name=mldebug-check",
        *args.srun_option,
        *RANK_PROGRAM,
    ]
    base = {k: v for k, v in outside_allocation(env).items() if k not in SLURM_STRIPPED}
    base["MASTER_ADDR"] = job.nodes[0]
    base["MASTER_PORT"] = str(args.master_port or envs.free_port())
    return argv, base, len(job.nodes) * per_node


def _hosts_launch(args) -> tuple[list[str], int]:
    """The launcher of `--hosts`: preflight/hosts.py, one ssh session per rank."""
    import json
    import shlex

    from mldebug.cluster.front import SSH_DEFAULTS, SSH_OPTIONS_ENV, remote_mldebug
    from mldebug.cluster.hostlist import expand

    try:
        hosts = list(expand(args.hosts))
    except ValueError as error:
        raise MldebugError(f"--hosts: {error}", "Give hosts as node[01-04] or a,b,c.") from None
    remote = remote_mldebug()
    python = remote[:-2] if remote[-2:] == ["-m", "mldebug"] else [sys.executable]
    per_node = args.nproc_per_node or 1
    spec = {
        "hosts": hosts,
        "nproc": per_node,
        "port": args.master_port or envs.free_port(),
        "ssh": ["ssh", *SSH_DEFAULTS, *shlex.split(os.environ.get(SSH_OPTIONS_ENV, ""))],
        "remote": python,
        "env": _limits(args),
    }
    command = [sys.executable, "-m", "mldebug.preflight.hosts", json.dumps(spec)]
    return command, per_node * len(hosts)


def _run_dir(path: str | None) -> RunPaths:
    if path and os.path.exists(os.path.join(path, MANIFEST)):
        raise MldebugError(f"{path} already holds a run", "Give --run-dir a new directory.")
    try:
        return create_run_dir(path)
    except UntrustedDirError as error:
        raise MldebugError(
            f"refusing the run directory {error.filename}: {error.strerror}",
            "A run directory must be yours and writable by you only (chmod 700 DIR).",
        ) from None
    except OSError as error:
        raise MldebugError(
            f"cannot create the run directory: {error}", "Pass a writable --run-dir."
        ) from None


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _supervise(spec: LaunchSpec, limit: float) -> bool:
    """Run the ranks to their end or the time limit; True when the limit stopped them."""
    supervisor = Supervisor(spec)
    handled = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {signum: signal.getsignal(signum) for signum in handled}
    for signum in handled:
        signal.signal(signum, lambda number, _frame: supervisor.stop(number))
    try:
        try:
            supervisor.start()
        except OSError as error:
            raise MldebugError(
                f"cannot start {spec.command[0]}: {error}", "Check the command."
            ) from None
        hit = supervisor.wait(limit) is None
        if hit:
            supervisor.stop()
            supervisor.wait()
        return hit
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def nccl_facts(paths: RunPaths) -> tuple[dict[int, str], list[Finding]]:
    """NCCL's transport per rank, and what its logs say about the network (only where a
    rank wrote an NCCL log: the gloo check on CPU writes none)."""
    from mldebug import model
    from mldebug.nccl.scan import scan_run

    try:
        names = os.listdir(paths.nccl_dir)
    except OSError:
        return {}, []
    if not names:
        return {}, []
    scan = scan_run(paths.root)
    transports = {
        log.rank: log.network for log in scan.ranks if log.rank is not None and log.network
    }
    kinds = (model.KIND_NCCL_NETWORK, model.KIND_NCCL_VERSION, model.KIND_NCCL_INIT)
    return transports, [f for f in scan.findings if f.kind in kinds]


def main(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if command and args.slurm:
        parser.error("give either --slurm JOBID or -- COMMAND, not both")
    if sum(bool(x) for x in (command, args.slurm, args.hosts)) > 1:
        parser.error("give one of --slurm JOBID, --hosts HOSTLIST or -- COMMAND")
    if args.hosts:
        from mldebug.cluster.hostlist import expand

        try:
            expand(args.hosts)
        except ValueError as error:
            parser.error(f"--hosts: {error}")
    if args.srun_option and not args.slurm:
        parser.error("--srun-option goes with --slurm JOBID")
    if command and args.nproc_per_node:
        parser.error("--nproc-per-node applies to the ranks mldebug starts; give it to COMMAND")
    env = dict(os.environ)
    world: int | None
    if args.slurm:
        command, env, world = _slurm_launch(args, env)
        mode, nproc = envs.MODE_WRAP, 1
    elif args.hosts:
        command, world = _hosts_launch(args)
        mode, nproc = envs.MODE_WRAP, 1
    elif command:
        mode, nproc, world = envs.MODE_WRAP, 1, None
    else:
        nproc = args.nproc_per_node or 2
        mode, command, world = envs.MODE_NATIVE, list(RANK_PROGRAM), nproc
    env.update(_limits(args))
    paths = _run_dir(args.run_dir)
    make_private_dir(paths.nccl_dir)
    spec = LaunchSpec(
        paths=paths,
        command=command,
        mode=mode,
        nproc=nproc,
        master_addr=args.master_addr,
        master_port=args.master_port,
        options=envs.DebugOptions(nccl_debug=os.environ.get("NCCL_DEBUG", "INFO")),
        console=None,  # the ranks' output goes to their logs; the report says what matters
        argv=["mldebug", "check", *argv],
        env=env,
    )
    ranks = f"{world} ranks" if world else "the ranks of the command"
    _say(f"mldebug check: {ranks}, run directory {paths.root}, time limit {args.time_limit:g}s")
    began = time.monotonic()
    hit = _supervise(spec, args.time_limit)
    ended = time.monotonic()
    transports, more = nccl_facts(paths)
    results = read_run(paths, world, transports, hit)
    verdict = check_verdict(results, more)
    data = to_json(verdict, str(paths.root))
    text = render_text(verdict, str(paths.root))
    data["seconds"] = round(time.monotonic() - began, 3)
    data["seconds_judging"] = round(time.monotonic() - ended, 3)  # reading, judging, rendering
    try:
        safeio.write_json_atomic(paths.root / RESULT_FILE, data)
        make_private_dir(paths.reports_dir)
        with os.fdopen(safeio.create_new(paths.reports_dir / "check.txt"), "w") as handle:
            handle.write(text)
    except OSError as error:
        _say(f"mldebug check: could not keep the results in {paths.root}: {error}")
    if args.json:
        import json

        write_out(json.dumps(data, indent=1) + "\n")
    else:
        write_out(text)
    trouble = any(f.severity != SEVERITY_INFO for f in verdict.findings)
    return EXIT_FINDINGS if trouble else EXIT_OK
