"""`mldebug collect`: the per-node half of `dump --slurm/--hosts` (docs/multi-node.md).

    mldebug collect                      every rank process of yours on this node
    mldebug collect --slurm-job JOBID    the tasks of one SLURM job on this node
    mldebug collect --run DIR|NAME       the ranks of one `mldebug run`
    mldebug collect --pod HOSTNAME       in a Kubernetes pod: the pod's own processes

It finds this node's ranks as `mldebug dump` does, reads their stacks a few times with
py-spy (and their agents' state.json where they have one), tells stuck from running here,
and prints one JSON line: the node document, each rank as read with its state.json as
read, its stacks already merged (the front end judges every node's ranks together), and what the
node's NCCL RAS endpoint answered, where one does (about 2 s at most; read-only). Bounded: every
rank within --timeout, the whole within --deadline. It needs only mldebug and py-spy on
the node; the front end (`mldebug dump --slurm ...`) starts it on every node.

exit status: 0 the document was printed (whatever it says of the ranks), 2 bad command
line, 3 no rank process here, 5 py-spy missing, 74 stdout could not be written.
"""

from __future__ import annotations

import argparse
import json

from mldebug.commands.common import (
    add_json,
    command_parser,
    count,
    observe_job,
    seconds,
    write_out,
)

DEFAULT_DEADLINE = 20.0


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser(
        "collect",
        "Read this node's ranks and print one merged JSON document for the node\n"
        "(what `mldebug dump --slurm/--hosts` runs on every node).",
        __doc__.split("exit status:")[1].join(["exit status:", ""]),
    )
    parser.add_argument("--slurm-job", metavar="JOBID", help="only the tasks of this SLURM job")
    parser.add_argument("--run", metavar="DIR", help="only the ranks of this `mldebug run`")
    parser.add_argument(
        "--pod",
        metavar="HOSTNAME",
        help="only processes whose HOSTNAME is this (a Kubernetes pod's; what --k8s passes)",
    )
    add_json(parser, "JSON output (the only format)")
    parser.add_argument("--host", help="the name to give this node (default: its hostname)")
    parser.add_argument("-n", "--native", action="store_true", help="native (C/C++) frames too")
    parser.add_argument("--nonblocking", action="store_true", help="do not pause the ranks")
    parser.add_argument("--samples", type=count(1, 20), default=3, help="readings per rank")
    parser.add_argument("--interval", type=seconds(0, 10), default=0.4, help="between readings")
    parser.add_argument(
        "--timeout", type=seconds(0, 120, allow_low=False), default=5.0, help="per rank"
    )
    parser.add_argument(
        "--deadline",
        type=seconds(0, 600, allow_low=False),
        default=DEFAULT_DEADLINE,
        help=f"seconds for the whole node (default {DEFAULT_DEADLINE:g})",
    )
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.slurm_job is not None and not args.slurm_job.isdigit():
        raise_usage(f"--slurm-job {args.slurm_job!r} is not a job id (a number)")

    from mldebug.cluster.document import node_document
    from mldebug.cluster.nodetargets import node_targets
    from mldebug.collect.ras import ask_ras, carried, quiet_notes
    from mldebug.files import rundir
    from mldebug.observe.look import run_hang_after
    from mldebug.observe.pyspy import views_of

    if args.native and args.nonblocking:
        raise_usage("--native and --nonblocking cannot be used together")
    job = node_targets(args.slurm_job, args.run, args.pod)
    # The ranks as read, each with its agent's state.json as read: the front end judges them
    # with every other node's, by the analysis a local dump uses (analysis.nodes).
    snapshot, readings = observe_job(job, args, keep_agent_files=True)
    views, failures = views_of(readings, snapshot.time)
    host = args.host or rundir.hostname()
    # NCCL's RAS on this node (bounded, read-only): the front end judges the answer with
    # every node's stacks
    asked = ask_ras([t.pid for t in job.targets])
    notes = readings.notes + quiet_notes(asked.notes)
    document = node_document(
        snapshot,
        host,
        notes,
        args.slurm_job,
        readings.job.crashes,
        readings.events,
        ras=carried(asked),
        views=views,
        failures=failures,
        agent_files=readings.agent_files,
        hang_after=run_hang_after(readings.job.run_dir),
    )
    write_out(json.dumps(document, separators=(",", ":")) + "\n")
    return 0


def raise_usage(message: str) -> None:
    from mldebug.errors import EXIT_USAGE, MldebugError

    raise MldebugError(message, exit_code=EXIT_USAGE)
