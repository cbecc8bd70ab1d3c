"""`mldebug dump`: every rank's stack, merged across ranks, with a verdict.

    mldebug dump                    the newest live `mldebug run` job, else your rank processes
    mldebug dump --pid PID          a rank, or a launcher (torchrun, srun...) and all its ranks
    mldebug dump --run DIR          the ranks of an `mldebug run` directory
    mldebug dump --json             the machine-readable report (ranks, groups, findings)
    mldebug dump --native-all       every thread's native frames too (gdb; docs/gdb.md)
    mldebug dump --core CORE...     crashed ranks' core files (gdb; docs/gdb.md)

Every read is bounded: `--timeout` per rank, `--deadline` for the whole dump (ranks not
read by then are reported as timed out), at most MAX_PIDS processes, each read once however
many ranks name it. Exit codes: EXIT_STATUS below (and README).
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from mldebug.commands.common import (
    CLUSTER_HELP,
    TARGET_HELP,
    add_cluster_arguments,
    add_duration,
    add_json,
    add_target_arguments,
    cluster_spec,
    command_parser,
    count,
    exit_of,
    print_report_with,
    reading_options,
    seconds,
    target_of,
    write_out,
)
from mldebug.commands.dump_profile import add_profile_arguments, profile_source
from mldebug.commands.native import EXIT_LINES as NATIVE_EXIT_LINES
from mldebug.commands.native import (
    NativeSource,
    add_native_arguments,
    check_gdb,
    dump_cores,
    emit,
)
from mldebug.errors import (
    K8S_PTRACE_REMEDY,
    PTRACE_REMEDY,
    MldebugError,
    PermissionDeniedError,
)
from mldebug.model import (
    FAIL_PERMISSION,
    STATE_UNREADABLE,
    JobSnapshot,
)
from mldebug.ranges import parse_ranks

if TYPE_CHECKING:
    from collections.abc import Sequence

    from rich.console import Console

    from mldebug.model import JobReadings, JobTargets
    from mldebug.observe.look import Source

EXIT_STATUS = """\
exit status:
  0    nothing wrong found (warnings and info only)
  1    the job has problems: at least one error finding
  2    bad command line (a bad TARGET, --pid, count or duration)
  3    nothing to look at: no such pid, no job found, several jobs found
  4    no permission: another user's pid, or ptrace refused for every rank
  5    py-spy is not installed (--slurm: squeue/srun; --hosts: ssh or pdsh; --k8s: kubectl;
       --native-all, --core: gdb)
  70   internal error: a bug in mldebug (`mldebug --debug dump ...` shows the traceback)
  74   the report could not be written (standard output closed, disk full)
  130  interrupted (Ctrl-C)
  141  the reader of the output went away (`mldebug dump | head`)
"""
EXIT_STATUS += NATIVE_EXIT_LINES

DEFAULT_DEADLINE = 30.0  # seconds for a whole dump, however many ranks do not answer


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser(
        "dump",
        "Read every rank's stack with py-spy, merge them across ranks and say\n"
        "which rank is the problem, at which line.",
        f"{TARGET_HELP}\n{CLUSTER_HELP}\n{EXIT_STATUS}",
    )
    add_target_arguments(parser)
    add_cluster_arguments(parser)
    add_json(parser)
    parser.add_argument("-n", "--native", action="store_true", help="include native (C/C++) frames")
    parser.add_argument(
        "--nonblocking",
        action="store_true",
        help="do not pause the ranks while reading (less exact)",
    )
    parser.add_argument("--ranks", metavar="SPEC", help="show these ranks' full stacks (0-3,7)")
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="every rank's threads and the unfolded tree"
    )
    parser.add_argument(
        "--samples",
        type=count(1, 100),
        default=3,
        help="stack readings per rank, to tell stuck from running (default 3)",
    )
    parser.add_argument(
        "--interval",
        type=seconds(0, 60),
        default=0.4,
        help="seconds between readings (default 0.4)",
    )
    add_duration(parser, "--timeout", 600, 5.0, "seconds allowed to read one rank (default 5)")
    add_duration(
        parser,
        "--deadline",
        3600,
        DEFAULT_DEADLINE,
        "seconds allowed to the whole dump; ranks not read by then are reported as "
        f"timed out (default {DEFAULT_DEADLINE:g})",
        "SECONDS",
    )
    parser.add_argument(
        "--census",
        action="store_true",
        help="ask each rank of an `mldebug run` job for a census of its live tensors "
        "(what is growing) and show it",
    )
    add_native_arguments(parser)
    add_profile_arguments(parser)  # --profile, --rate (commands/dump_profile.py)
    return parser


def _targets_from_args(pids: list[int], run_dir: str | None) -> JobTargets:
    from mldebug.targets import resolve_targets

    return resolve_targets(pids, run_dir if not pids else None)


def _all_refused(snapshot: JobSnapshot) -> bool:
    """True when no rank could be read because ptrace was refused."""
    readable = [v for v in snapshot.ranks if v.target is not None]
    return bool(readable) and all(
        v.state == STATE_UNREADABLE and "ptrace" in v.detail for v in readable
    )


def _observe_here(
    args: argparse.Namespace, pids: list[int], run_dir: str | None, more: Sequence[Source] = ()
) -> tuple[JobSnapshot, JobReadings]:
    """The job on this machine, looked at once as the hang watchdog looks (mldebug.observe.look):
    its snapshot and the notes reading left."""
    from mldebug.observe.look import look_at_job

    job = _targets_from_args(pids, run_dir)
    if args.census:
        _ask_for_census(job)
    from mldebug.commands.dump_ras import ras_source  # NCCL's RAS, when an endpoint answers

    sources = [ras_source, *more] + ([profile_source(job, args)] if args.profile else [])
    return look_at_job(job, sources=sources, **reading_options(args))


def _ask_for_census(job: JobTargets) -> None:
    """--census: every rank's agent counts its live tensors before the dump reads it."""
    from mldebug.collect.census import request_census, wait_for_census

    if job.run_dir is None:
        raise MldebugError(
            "--census needs ranks started by `mldebug run` (their agent takes the census)",
            "Start the job with `mldebug run`, or drop --census.",
        )
    since = request_census(job.run_dir)
    ranks = [t.rank for t in job.targets if t.rank is not None]
    wait_for_census(job.run_dir, ranks, since)


def main(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.native and args.nonblocking:
        raise MldebugError(
            "--native and --nonblocking cannot be used together",
            "py-spy must pause a process to read its native frames; drop one.",
        )
    try:
        wanted = parse_ranks(args.ranks) if args.ranks else None
    except ValueError as error:
        raise MldebugError(
            f"--ranks: {args.ranks!r} is not a list of ranks like 0-3,7 ({error})"
        ) from None
    spec = cluster_spec(parser, args, args.deadline)  # first: it says what a TARGET beside it is
    pids, run_dir = target_of(parser, args)
    if spec is not None and (args.core is not None or args.native_all):
        raise MldebugError(
            "--core and --native-all read this machine's ranks and cores only",
            "Run `mldebug dump --native-all` (or --core) on the node itself; drop --slurm/--hosts.",
        )
    if args.core is not None:
        return dump_cores(args, run_dir)
    native = None
    if args.native_all:
        check_gdb()
        native = NativeSource(args.gdb_timeout, args.deadline * 4)
    readings = None
    notes: Sequence[str]  # the cluster's list, or this machine's readings' tuple
    if spec is not None:
        from dataclasses import replace

        from mldebug.cluster.front import collect_cluster

        options = ["--samples", str(args.samples), "--interval", f"{args.interval:g}"]
        options += ["--timeout", f"{args.timeout:g}"] + ["--native"] * args.native
        options += ["--nonblocking"] * args.nonblocking
        spec = replace(spec, collect_options=tuple(options))
        snapshot, notes = collect_cluster(spec, lasting=True)  # kept until the command ends
    else:
        snapshot, readings = _observe_here(args, pids, run_dir, [native] if native else [])
        notes = readings.notes
    if _all_refused(snapshot):
        raise PermissionDeniedError(
            f"could not read any rank's stack ({FAIL_PERMISSION}: ptrace refused)",
            K8S_PTRACE_REMEDY if spec is not None and spec.k8s is not None else PTRACE_REMEDY,
        )
    if native is not None and readings is not None:
        dumps = native.dumps

        def rest(console: Console) -> None:
            from rich.text import Text

            from mldebug.report.text import print_report

            for note in notes:
                console.print(Text(note, style="dim"))
            print_report(snapshot, console, verbose=args.verbose, ranks=wanted)

        emit(snapshot, dumps, args.json, args.verbose, rest)
    elif args.json:
        from mldebug.report.jsonout import snapshot_to_json

        write_out(json.dumps(snapshot_to_json(snapshot), indent=1) + "\n")
    else:
        from rich.text import Text

        from mldebug.report.text import print_report

        def draw(console: Console) -> None:
            for note in notes:  # rank-derived text: plain, never markup
                console.print(Text(note, style="dim"))
            print_report(snapshot, console, verbose=args.verbose, ranks=wanted)

        print_report_with(draw)
    return exit_of(snapshot.findings)
