"""`mldebug explain [PATH... | -]`: here is what I saw; what does it say?

    mldebug explain slurm-1234.out             a job's output
    mldebug explain RUN/                       a run directory (logs, NCCL logs, dumps)
    pbpaste | mldebug explain -                a paste from an issue thread or a chat
    mldebug explain --json logs/ -             any mix, as JSON
    mldebug explain traces/                    torch.profiler traces of every rank
                                               (*.json, *.json.gz; or paste their names)

Exit codes: as `mldebug nccl`'s (commands/common.report_parser).
"""

from __future__ import annotations

import argparse
import shutil
import sys

from mldebug.commands.common import (
    nothing_readable,
    report_parser,
    write_report,
)
from mldebug.errors import EXIT_FINDINGS, EXIT_OK

MAX_STDIN = 32 << 20


def build_parser() -> argparse.ArgumentParser:
    parser = report_parser(
        "explain",
        "Explain a log, a paste or a run directory: NCCL, torch.distributed and\n"
        "gloo messages, tracebacks, torchelastic summaries, OOMs, py-spy dumps, nvidia-smi\n"
        "tables, p2pBandwidthLatencyTest matrices, Flight Recorder dumps and torch.profiler\n"
        "traces (per rank: compute, communication, idle; the late rank; data and sync waits).\n"
        "Findings most sure first, each with the lines it rests on, its ranks, the fix and\n"
        "the recipe.",
        exits=(
            "nothing wrong found (warnings and info only)",
            "nothing readable: no path given could be read (a trace that is not one, a\n"
            "       truncated gzip, a symbolic link), and no paste on stdin",
        ),
        paths=("*", "files or directories; - (or nothing, with input piped) reads standard input"),
    )
    parser.add_argument("--all", action="store_true", help="every finding, not the first few")
    return parser


def _stdin() -> bytes:
    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:
        return b""
    return stream.read(MAX_STDIN + 1)


def main(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    paths = list(args.paths)
    piped = sys.stdin is not None and not sys.stdin.isatty()
    if not paths:
        if not piped:
            parser.error("give a PATH, or - and paste (Ctrl-D ends it), or pipe a log in")
        paths = ["-"]
    from mldebug.explain import stream

    # A big log's reading begins now (threads and `wc -l` on the other CPUs): the engine's
    # and the report's imports load while it runs.
    begun = stream.begin(paths)
    try:
        from mldebug.explain.engine import explain
        from mldebug.report.explain import json_report, text_report

        stdin = _stdin() if "-" in paths else None
        report = explain(paths, stdin, begun)
    finally:
        for read in begun:
            read.stop()
    if not report.readable:
        raise nothing_readable(
            report.problems,
            "the paste was empty",
            "Give log files, profiler traces (*.json, *.json.gz) or directories, or pipe a "
            "log in: `cat slurm.out | mldebug explain -`.",
        )
    width = None
    if sys.stdout is not None and sys.stdout.isatty():  # a person reads it: wrap
        width = max(60, min(shutil.get_terminal_size().columns, 120) - 1)
    write_report(
        args.json,
        lambda: json_report(report),
        lambda: text_report(report, show_all=args.all, width=width),
    )
    return EXIT_FINDINGS if report.errors else EXIT_OK
