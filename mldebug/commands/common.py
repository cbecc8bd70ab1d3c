"""What the read-only commands share: option types that refuse bad values, and stdout.

Each option type turns a command-line word into a value or raises argparse.ArgumentTypeError,
which `Parser` prints as one line (exit 2): a pid is a positive number the kernel could
hand out, a count is bounded, a duration is finite. Every command that looks at a job
(`dump`, `attach`) takes its TARGET, --pid and --run through `add_target_arguments` and
`target_of`: a bare TARGET is a pid or an existing directory, nothing else, and any bad
one is refused the same way, in one line with exit 2.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from mldebug.errors import (
    EXIT_FINDINGS,
    EXIT_OK,
    EXIT_USAGE,
    MldebugError,
    NoTargetError,
    OutputError,
)
from mldebug.textsafe import printable

if TYPE_CHECKING:
    from _typeshed import SupportsWrite
    from rich.console import Console

    from mldebug.cluster.front import ClusterSpec
    from mldebug.model import Finding, JobReadings, JobSnapshot, JobTargets

PID_MAX = 1 << 22  # Linux's PID_MAX_LIMIT: no pid is larger


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line: what is wrong, and where help is."""

    def error(self, message: str) -> NoReturn:
        # The message may quote what was typed (a path, a stray word): no terminal escape.
        self.exit(EXIT_USAGE, f"{self.prog}: {printable(message)} (see {self.prog} --help)\n")

    def print_help(self, file: SupportsWrite[str] | None = None) -> None:
        # argparse swallows a write error: `--help | head` would end 0 with the help cut.
        if file is None:
            write_out(self.format_help())
        else:
            super().print_help(file)


def command_parser(name: str, description: str, epilog: str | None = None) -> Parser:
    """The parser of `mldebug NAME`, its description and epilog shown with their own lines."""
    return Parser(
        prog=f"mldebug {name}",
        description=description,
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def report_parser(
    name: str, description: str, exits: tuple[str, str], paths: tuple[str, str]
) -> Parser:
    """The parser of a command that reads files into a report (`nccl`, `explain`): PATH...
    (`paths`: its nargs and help), --json, and their exit codes (`exits`: what 0 and 3 mean)."""
    nothing_wrong, nothing_read = exits
    epilog = f"""\
exit status:
  0    {nothing_wrong}
  1    problems found: at least one error finding
  2    bad command line
  3    {nothing_read}
  70   internal error: a bug in mldebug (`mldebug --debug {name} ...` shows the traceback)
  74   the report could not be written (standard output closed, disk full)
  141  the reader of the output went away (`mldebug {name} ... | head`)
"""
    parser = command_parser(name, description, epilog)
    nargs, help = paths
    parser.add_argument("paths", nargs=nargs, metavar="PATH", help=help)
    add_json(parser)
    return parser


def nothing_readable(problems: list[str], if_none: str, remedy: str) -> NoTargetError:
    """The error of a report command that could read none of what it was given: the first
    problems met (`if_none` where there were none), and what to give it instead."""
    return NoTargetError(f"nothing readable: {'; '.join(problems[:3]) or if_none}", remedy)


def write_report(as_json: bool, data: Callable[[], dict], text: Callable[[], str]) -> None:
    """A report on stdout: JSON for scripts (`--json`), else text for people."""
    write_out(json.dumps(data(), indent=1) + "\n" if as_json else text())


def add_json(parser: argparse.ArgumentParser, help: str = "print the report as JSON") -> None:
    parser.add_argument("--json", action="store_true", help=help)


def add_duration(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    flag: str,
    high: float,
    default: float,
    help: str,
    metavar: str | None = None,
) -> None:
    """An option of seconds, more than 0 and at most `high`."""
    parser.add_argument(
        flag,
        type=seconds(0, high, allow_low=False),
        default=default,
        metavar=metavar,
        help=help,
    )


def _is_number(text: str) -> bool:
    return text.isascii() and text.isdigit()  # "²".isdigit() is true, and int() refuses it


def pid(text: str) -> int:
    """A process id: 1 to PID_MAX."""
    value = int(text) if _is_number(text) and len(text) < 12 else 0
    if not 0 < value <= PID_MAX:
        raise argparse.ArgumentTypeError(f"{text!r} is not a pid (a number from 1 to {PID_MAX})")
    return value


def count(low: int, high: int) -> Callable[[str], int]:
    """A whole number from `low` to `high`."""

    def parse(text: str) -> int:
        value = int(text) if _is_number(text) and len(text) < 12 else None
        if value is None or not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number from {low} to {high}")
        return value

    return parse


def seconds(low: float, high: float, *, allow_low: bool = True) -> Callable[[str], float]:
    """A finite duration in seconds, from `low` (included or not) to `high`."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        above_low = value >= low if allow_low else value > low
        if not (math.isfinite(value) and above_low and value <= high):
            side = "at least" if allow_low else "more than"
            raise argparse.ArgumentTypeError(
                f"{text!r} is not a duration: give seconds, {side} {low:g} and at most {high:g}"
            )
        return value

    return parse


TARGET_HELP = """\
target: TARGET, --pid and --run may be combined; pids win over a run directory.
  TARGET     a pid (a rank's, or its launcher's) when it is a number, else an
             `mldebug run` directory; anything else is refused with exit 2
  nothing    the newest live `mldebug run` job, else your processes that carry
             rank environment (RANK, OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID)
"""


def add_target_arguments(parser: argparse.ArgumentParser) -> None:
    """TARGET, -p/--pid and --run: what to look at, the same for every command."""
    parser.add_argument(
        "target",
        nargs="?",
        metavar="TARGET",
        help="a pid (a rank's or its launcher's) or an `mldebug run` directory",
    )
    parser.add_argument(
        "-p",
        "--pid",
        type=pid,
        action="append",
        default=[],
        metavar="PID",
        help="a rank's pid, or a launcher's (expands to its ranks); repeatable",
    )
    parser.add_argument("--run", metavar="DIR", help="an `mldebug run` directory")


def target_of(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> tuple[list[int], str | None]:
    """(pids, run directory) from the arguments `add_target_arguments` added; a bad TARGET
    is a usage error in one line, exit 2, as a bad --pid is."""
    try:
        return split_target(args.target, args.pid, args.run)
    except MldebugError as error:
        parser.error(f"{error.message}. {error.remedy}" if error.remedy else error.message)


def split_target(
    target: str | None, pids: list[int], run: str | None
) -> tuple[list[int], str | None]:
    """A bare TARGET is a pid when it is a number, else an existing directory."""
    pids = list(pids)
    if target is None:
        return pids, run
    if _is_number(target):
        try:
            return [*pids, pid(target)], run
        except argparse.ArgumentTypeError as error:
            raise MldebugError(f"TARGET: {error}", exit_code=EXIT_USAGE) from None
    if run is not None:
        raise MldebugError(
            f"two run directories given: {target} and --run {run}",
            "Give one of them.",
            exit_code=EXIT_USAGE,
        )
    if not Path(target).is_dir():
        raise MldebugError(
            f"{target!r} is neither a pid nor a directory",
            "Pass a pid, --pid PID, or --run DIR.",
            exit_code=EXIT_USAGE,
        )
    return pids, target


CLUSTER_HELP = """\
several nodes (docs/multi-node.md): `mldebug collect` runs on every node and the
nodes' answers are merged into one report
  --slurm JOBID         the nodes of a running SLURM job, through srun --overlap
  --hosts HOSTLIST      these hosts (node[01-04],node07), through ssh (BatchMode) or pdsh;
                        with --slurm JOBID or --run DIR|NAME: only that job's ranks there
  --k8s KIND/NAME       the pods of a Kubernetes job through kubectl exec: pytorchjob/NAME,
                        trainjob/NAME, jobset/NAME, pod/NAME; or --k8s -l SELECTOR
                        (--namespace NS, --context CTX; -n stays --native)
"""


def add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    """--slurm, --hosts, --via, --ssh-option: read the ranks of several nodes."""
    parser.add_argument("--slurm", metavar="JOBID", help="every node of this SLURM job")
    parser.add_argument("--hosts", metavar="HOSTLIST", help="these hosts: node[01-04],node07")
    parser.add_argument(
        "--via", choices=("ssh", "pdsh"), default="ssh", help="how to reach --hosts (ssh)"
    )
    parser.add_argument(
        "--ssh-option",
        action="append",
        default=[],
        metavar="OPT",
        help="an ssh option for --hosts, e.g. -p2222 (also $MLDEBUG_SSH_OPTIONS); repeatable",
    )
    parser.add_argument(
        "--k8s",
        nargs="?",
        const="",
        metavar="KIND/NAME",
        help="a Kubernetes job's pods: pytorchjob/NAME, trainjob/NAME, jobset/NAME, pod/NAME",
    )
    parser.add_argument(
        "-l", "--selector", metavar="SELECTOR", help="with --k8s: the pods with these labels"
    )
    parser.add_argument("--namespace", metavar="NS", help="with --k8s: the pods' namespace")
    parser.add_argument("--context", metavar="CTX", help="with --k8s: the kubeconfig context")


def cluster_spec(
    parser: argparse.ArgumentParser, args: argparse.Namespace, deadline: float
) -> ClusterSpec | None:
    """The ClusterSpec the arguments ask for, or None for a job on this machine."""
    if args.k8s is not None or args.selector is not None:
        return _k8s_spec(parser, args, deadline)
    if args.namespace is not None or args.context is not None:
        parser.error("--namespace and --context go with --k8s")
    if args.slurm is None and args.hosts is None:
        return None
    if args.target is not None or args.pid:
        parser.error("--slurm/--hosts read whole nodes: drop TARGET and --pid")
    if args.run is not None and args.hosts is None:
        parser.error("--run with --slurm: give the run's nodes with --hosts")
    if args.slurm is not None and not (args.slurm.isascii() and args.slurm.isdigit()):
        parser.error(f"--slurm {args.slurm!r} is not a job id (a number, as squeue shows)")
    from mldebug.cluster.front import ClusterSpec, parse_hosts

    try:
        hosts = parse_hosts(args.hosts) if args.hosts is not None else ()
    except MldebugError as error:
        parser.error(f"{error.message}. {error.remedy}")
    return ClusterSpec(
        slurm=args.slurm,
        hosts=hosts,
        via=args.via,
        ssh_options=tuple(args.ssh_option),
        run=args.run,
        deadline=deadline,
    )


def _k8s_spec(parser: argparse.ArgumentParser, args: argparse.Namespace, deadline: float):
    if args.target is not None and getattr(args, "native", False):
        parser.error(f"-n is --native (as in py-spy): the namespace is --namespace {args.target}")
    if args.target is not None or args.pid or args.slurm or args.hosts or args.run:
        parser.error("--k8s reads the job's pods: drop TARGET, --pid, --slurm, --hosts, --run")
    from mldebug.cluster.front import ClusterSpec
    from mldebug.cluster.k8s import K8sSpec
    from mldebug.cluster.k8spods import is_name, parse_target

    try:
        target = parse_target(args.k8s or None, args.selector)
    except ValueError as error:
        parser.error(f"--k8s: {error}")
    if args.namespace is not None and not is_name(args.namespace):
        parser.error(f"--namespace {args.namespace!r} is not a Kubernetes namespace name")
    if args.context is not None and (not args.context.isprintable() or not args.context):
        parser.error("--context: a kubeconfig context name (kubectl config get-contexts)")
    return ClusterSpec(deadline=deadline, k8s=K8sSpec(target, args.namespace, args.context))


def reading_options(args: argparse.Namespace) -> dict:
    """The collector's options from the reading options of `dump` and `collect` (--native,
    --nonblocking, --samples, --interval, --timeout, --deadline)."""
    from mldebug.collect.collector import MAX_PIDS, MAX_WORLD

    return {
        "native": args.native,
        "nonblocking": args.nonblocking,
        "samples": args.samples,
        "interval": args.interval,
        "timeout_per_rank": args.timeout,
        "deadline": args.deadline,
        "max_pids": MAX_PIDS,
        "max_world": MAX_WORLD,
    }


def observe_job(
    job: JobTargets, args: argparse.Namespace, **more: Any
) -> tuple[JobSnapshot, JobReadings]:
    """`observe_once` of a job with the reading options of `dump` and `collect` (and
    `more` of observe_once's): (snapshot, readings)."""
    from mldebug.observe.pyspy import observe_once

    return observe_once(job, **reading_options(args), **more)


def stdout_closed() -> bool:
    """True when there is no standard output to write to (`mldebug dump >&-`)."""
    if sys.stdout is None:
        return True
    try:
        os.fstat(sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        return not hasattr(sys.stdout, "write")  # a test's StringIO has no fileno: fine
    return False


def write_out(text: str) -> None:
    """Write a command's output. A reader that went away raises BrokenPipeError (the CLI
    exits quietly with 141, as Unix tools do); any other failure (stdout closed, disk
    full) is an OutputError with a message."""
    if sys.stdout is None:
        raise OutputError("standard output is closed: nothing to write the output to")
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except (OSError, ValueError) as error:  # ValueError: write to a closed file object
        raise OutputError(f"could not write the output: {error}") from None


def report_console(pipe_width: int = 140) -> Console:
    """A rich Console on stdout for a report. A pipe or file gets long lines rather than
    rich's default 80 columns; a reader that goes away is a BrokenPipeError for the CLI to
    end quietly with (rich's own answer is SystemExit(1), which would read as "findings")."""
    from rich.console import Console

    class ReportConsole(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            raise BrokenPipeError

    return ReportConsole(highlight=False, width=None if sys.stdout.isatty() else pipe_width)


def print_report_with(draw: Callable) -> None:
    """`draw(console)` onto a report console; a write that fails (disk full, a closed file)
    is one OutputError line, a reader that went away a BrokenPipeError."""
    console = report_console()
    try:
        draw(console)
    except BrokenPipeError:
        raise
    except OSError as error:  # the report is only written here: disk full, closed file
        raise OutputError(f"could not write the report: {error}") from None


def exit_of(findings: Iterable[Finding]) -> int:
    """A report's exit code: 1 with an error finding, else 0."""
    from mldebug.model import SEVERITY_ERROR

    return EXIT_FINDINGS if any(f.severity == SEVERITY_ERROR for f in findings) else EXIT_OK
