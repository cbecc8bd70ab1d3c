"""`mldebug nccl PATH...`: NCCL debug logs, torch.distributed errors and Flight Recorder
dumps, read in one pass and compared across ranks.

    mldebug nccl <run>/nccl                  the NCCL_DEBUG_FILE logs of an `mldebug run`
    mldebug nccl slurm-1234.out ranks/       any mix of files and directories
    mldebug nccl --json logs/                the same as JSON (`findings` as in dump --json)

Exit codes: in its --help (commands/common.report_parser) and the README.
"""

from __future__ import annotations

import argparse

from mldebug.commands.common import (
    exit_of,
    nothing_readable,
    report_parser,
    write_report,
)


def build_parser() -> argparse.ArgumentParser:
    parser = report_parser(
        "nccl",
        "Read NCCL debug logs (NCCL_DEBUG=INFO), torch.distributed errors (the\n"
        "ProcessGroupNCCL watchdog, gloo, the TCPStore) and Flight Recorder dumps, one pass\n"
        "over each file, and say which rank is the odd one out.",
        exits=(
            "nothing wrong found (warnings and info only), or no NCCL/torch lines at all",
            "nothing readable: no path given could be read",
        ),
        paths=("+", "log files or directories"),
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="every rank's summary, not the first few"
    )
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    from mldebug.analysis.judge import Evidence, judge
    from mldebug.nccl.scan import scan_paths
    from mldebug.report.nccl import json_report, text_report

    scan = scan_paths(args.paths)
    scan.findings = list(judge(Evidence(found=tuple(scan.findings))))  # the one verdict
    if scan.files_read == 0:
        raise nothing_readable(
            scan.problems,
            "no files in the directories given",
            "Give NCCL log files (NCCL_DEBUG_FILE, a job's output) or directories holding them.",
        )
    write_report(
        args.json, lambda: json_report(scan), lambda: text_report(scan, verbose=args.verbose)
    )
    return exit_of(scan.findings)
