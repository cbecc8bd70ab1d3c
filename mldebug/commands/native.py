"""`mldebug dump --native-all` and `mldebug dump --core CORE... [--exe PYTHON]`: the gdb
path of `dump` (docs/gdb.md). Kept here so dump.py only hands over to it.

    mldebug dump --native-all          every thread of every rank, native frames (gdb),
                                       lined up with py-spy's Python threads
    mldebug dump --core A B --exe PY   each core's threads, signal and crashing thread,
                                       and the cross-rank verdict over the cores
    mldebug dump --core --run DIR      the cores `mldebug run --core-dumps` kept in DIR
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import TYPE_CHECKING

from mldebug.commands.common import add_duration, exit_of, print_report_with, write_out
from mldebug.errors import (
    PTRACE_REMEDY,
    MldebugError,
    PermissionDeniedError,
)
from mldebug.model import FAIL_PERMISSION, JobSnapshot, NativeDump, SourceFindings

if TYPE_CHECKING:
    from rich.console import Console

EXIT_LINES = """\
  2    also: --core given a file that is not a core, or a core that does not match --exe
  3    also: --core found no core (one piped to systemd-coredump/apport: the command to get it)
  4    also: gdb refused by ptrace for every rank (--native-all)
  5    also: gdb is not installed (--native-all, --core): apt-get install gdb
"""


def add_native_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("native stacks (gdb; docs/gdb.md)")
    group.add_argument(
        "--native-all",
        action="store_true",
        help="also read every thread of every rank with gdb (native frames, gloo/NCCL "
        "threads included), lined up with py-spy's Python threads; slow on torch ranks",
    )
    group.add_argument(
        "--core",
        nargs="*",
        metavar="CORE",
        help="read core files (one per rank) instead of live ranks: threads, signal, "
        "crashing thread, verdict; without a file: the cores of --run DIR",
    )
    group.add_argument(
        "--exe",
        metavar="PYTHON",
        help="the interpreter the crashed ranks ran (default: the one each core names)",
    )
    add_duration(
        group,
        "--gdb-timeout",
        600,
        60.0,
        "seconds gdb may take for one rank or core (default 60)",
        "SECONDS",
    )


def check_gdb() -> None:
    """Fail before anything is read when gdb is missing."""
    from mldebug.collect.gdb import find_gdb

    find_gdb()


class NativeSource:
    """`--native-all`: gdb reads every live rank's threads; what they say goes to the judge
    with the rest of the look, and the threads to the report's native section."""

    def __init__(self, timeout: float, deadline: float) -> None:
        self.timeout, self.deadline = timeout, deadline
        self.dumps: tuple[NativeDump, ...] = ()

    def __call__(self, snapshot: JobSnapshot, readings) -> SourceFindings:
        from mldebug.observe.gdb import native_of_snapshot

        found, self.dumps = native_of_snapshot(
            snapshot, readings, timeout=self.timeout, deadline=self.deadline
        )
        if self.dumps and all(d.failure == FAIL_PERMISSION for d in self.dumps):
            raise PermissionDeniedError(
                "gdb could not attach to any rank (ptrace refused)", PTRACE_REMEDY
            )
        return SourceFindings(found=found)


def emit(
    snapshot: JobSnapshot,
    dumps: tuple[NativeDump, ...],
    as_json: bool,
    verbose: bool,
    print_rest: Callable[[Console], None],
) -> None:
    """The report with the native part: `native` in JSON, a section after the text."""
    from mldebug.analysis.native import group_threads
    from mldebug.report.native import native_section, native_to_json

    if as_json:
        from mldebug.report.jsonout import snapshot_to_json

        data = snapshot_to_json(snapshot)
        data["native"] = native_to_json(dumps, group_threads(dumps))
        write_out(json.dumps(data, indent=1) + "\n")
        return

    def draw(console: Console) -> None:
        print_rest(console)
        console.print(native_section(dumps, group_threads(dumps), verbose=verbose))

    print_report_with(draw)


def dump_cores(args: argparse.Namespace, run_dir: str | None) -> int:
    """`mldebug dump --core ...`."""
    from pathlib import Path

    from mldebug.observe.gdb import cores_of_run, observe_cores

    check_gdb()
    cores = list(args.core or [])
    if not cores:
        if not run_dir:
            raise MldebugError(
                "--core needs core files, or --run DIR of a run started with --core-dumps"
            )
        cores = cores_of_run(Path(run_dir))
    snapshot, dumps = observe_cores(cores, exe=args.exe, run_dir=run_dir, timeout=args.gdb_timeout)

    def rest(console: Console) -> None:
        from mldebug.report.text import print_report

        print_report(snapshot, console, verbose=args.verbose)

    emit(snapshot, dumps, args.json, args.verbose, rest)
    return exit_of(snapshot.findings)
