"""`mldebug dump`: every rank's stack, merged across ranks, with a verdict.

    mldebug dump                    the newest live `mldebug run` job, else your rank processes
    mldebug dump --pid PID          a rank, or a launcher (torchrun, srun...) and all its ranks
    mldebug dump --run DIR          the ranks of an `mldebug run` directory
    mldebug dump --json             the machine-readable report (ranks, groups, findings)

Exit status: 0 nothing wrong found, 1 the job has problems (error findings), 3 nothing to
look at, 4 no permission, 5 py-spy missing (see errors.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from mldebug.errors import (
    EXIT_FINDINGS,
    EXIT_OK,
    PTRACE_REMEDY,
    MldebugError,
    PermissionDeniedError,
)
from mldebug.model import FAIL_PERMISSION, SEVERITY_ERROR, STATE_UNREADABLE, JobSnapshot
from mldebug.ranges import parse_ranks


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mldebug dump",
        description="Read every rank's stack with py-spy, merge them across ranks and say "
        "which rank is the problem, at which line.",
    )
    parser.add_argument("target", nargs="?", help="a pid or a run directory (same as --pid/--run)")
    parser.add_argument(
        "-p",
        "--pid",
        type=int,
        action="append",
        default=[],
        metavar="PID",
        help="a rank's pid, or a launcher's (expands to its ranks); repeatable",
    )
    parser.add_argument("--run", metavar="DIR", help="an `mldebug run` directory")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
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
        type=int,
        default=3,
        help="stack readings per rank, to tell stuck from running (default 3)",
    )
    parser.add_argument(
        "--interval", type=float, default=0.4, help="seconds between readings (default 0.4)"
    )
    parser.add_argument(
        "--timeout", type=float, default=5.0, help="seconds allowed to read one rank (default 5)"
    )
    return parser


def _targets_from_args(args):
    from mldebug.targets import resolve_targets

    pids = list(args.pid)
    run_dir = args.run
    if args.target:
        if args.target.isdigit():
            pids.append(int(args.target))
        else:
            run_dir = run_dir or args.target
    return resolve_targets(pids, run_dir if not pids else None)


def _all_refused(snapshot: JobSnapshot) -> bool:
    """True when no rank could be read because ptrace was refused."""
    readable = [v for v in snapshot.ranks if v.target is not None]
    return bool(readable) and all(
        v.state == STATE_UNREADABLE and "ptrace" in v.detail for v in readable
    )


def _write_out(text: str) -> None:
    """Print, tolerating a reader that goes away early (`mldebug dump --json | head`)."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush stays quiet


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if args.native and args.nonblocking:
        raise MldebugError(
            "--native and --nonblocking cannot be used together",
            "py-spy must pause a process to read its native frames; drop one.",
        )
    if args.samples < 1 or args.interval < 0 or args.timeout <= 0:
        raise MldebugError("--samples must be >= 1, --interval >= 0 and --timeout > 0")
    try:
        wanted = parse_ranks(args.ranks) if args.ranks else None
    except ValueError as error:
        raise MldebugError(f"--ranks: {error}", "Write ranks like 0-3,7.") from None

    from mldebug.collect.collector import collect_once

    job = _targets_from_args(args)
    snapshot = collect_once(
        job,
        native=args.native,
        nonblocking=args.nonblocking,
        samples=args.samples,
        interval=args.interval,
        timeout_per_rank=args.timeout,
    )
    if _all_refused(snapshot):
        raise PermissionDeniedError(
            f"could not read any rank's stack ({FAIL_PERMISSION}: ptrace refused)", PTRACE_REMEDY
        )
    if args.json:
        from mldebug.report.jsonout import snapshot_to_json

        _write_out(json.dumps(snapshot_to_json(snapshot), indent=1) + "\n")
    else:
        from rich.console import Console

        from mldebug.report.text import print_report

        # A pipe or file gets long lines rather than rich's default 80 columns.
        console = Console(highlight=False, width=None if sys.stdout.isatty() else 140)
        try:
            for note in job.notes:
                console.print(f"[dim]{note}[/dim]")
            print_report(snapshot, console, verbose=args.verbose, ranks=wanted)
        except BrokenPipeError:
            _write_out("")
    has_errors = any(f.severity == SEVERITY_ERROR for f in snapshot.findings)
    return EXIT_FINDINGS if has_errors else EXIT_OK
