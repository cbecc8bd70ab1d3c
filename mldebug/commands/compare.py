"""`mldebug compare RUN_A RUN_B`: two runs' step time and its split side by side.

    mldebug compare ~/.mldebug/runs/OLD ~/.mldebug/runs/NEW
    mldebug compare --json OLD NEW
    mldebug compare --fail-slower 1.1 BASELINE NEW     exit 1 when NEW's step is 10% longer

Each RUN is a run directory of `mldebug run` (live or ended): its ranks' state.json carry the
whole run's step time in blocks (docs/agent.md). Exit codes: in --help and the README.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from mldebug.commands.common import add_json, command_parser, write_report
from mldebug.errors import EXIT_FINDINGS, EXIT_OK, NoTargetError

MAX_RANKS = 4096  # state files read a run

EPILOG = """\
exit status:
  0    compared (with --fail-slower: B is not that much slower)
  1    with --fail-slower RATIO: B's median step is more than RATIO times A's
  2    bad command line
  3    a RUN is not a readable run directory of `mldebug run`, or has no step timing
  70   internal error: a bug in mldebug (`mldebug --debug compare ...` shows the traceback)
  74   the report could not be written (standard output closed, disk full)
  141  the reader of the output went away (`mldebug compare ... | head`)
"""


def _ratio(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 1.0 <= value <= 1000.0:
        raise argparse.ArgumentTypeError(f"{text} is not between 1 and 1000")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser(
        "compare",
        "Compare two runs of `mldebug run`: their median step time and its split into\n"
        "data wait, compute, collectives and host syncs, side by side per rank, and say\n"
        "what got slower in RUN_B and on which ranks.",
        EPILOG,
    )
    parser.add_argument("run_a", metavar="RUN_A", help="the run to compare with (the baseline)")
    parser.add_argument("run_b", metavar="RUN_B", help="the run to look at")
    parser.add_argument(
        "--fail-slower",
        type=_ratio,
        metavar="RATIO",
        help="exit 1 when RUN_B's median step is more than RATIO times RUN_A's (e.g. 1.1)",
    )
    add_json(parser)
    return parser


def read_run(path: str) -> tuple[dict, list[str]]:
    """rank -> RankTiming of a run directory, and what differs from a plain read."""
    from mldebug.collect.agentstate import read_state
    from mldebug.files.rundir import RunPaths, read_manifest

    root = Path(path)
    if root.is_symlink() or not root.is_dir() or read_manifest(root) is None:
        raise NoTargetError(
            f"{path} is not an mldebug run directory (no readable run.json)",
            "Give two run directories that `mldebug run` printed (mldebug: run directory ...).",
        )
    if os.stat(root).st_mode & 0o022:
        raise NoTargetError(
            f"{path} is writable by others: its files may have been planted, not read",
            f"Make it yours alone (chmod go-w {path}) if you trust its content.",
        )
    timings = {}
    for rank in RunPaths(root).rank_ids()[:MAX_RANKS]:
        state = read_state(root, rank)
        if state is not None and state.timing is not None:
            timings[rank] = state.timing
    return timings, []


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    from mldebug.analysis.compare import compare
    from mldebug.report.compare import json_report, text_report

    a, notes_a = read_run(args.run_a)
    b, notes_b = read_run(args.run_b)
    notes = notes_a + notes_b
    if len(a) != len(b) and a and b:
        notes.append(f"A has {len(a)} ranks with timing, B {len(b)}")
    comparison = compare(args.run_a, a, args.run_b, b, notes)
    if comparison is None:
        empty = args.run_a if not any(t.steps or t.history for t in a.values()) else args.run_b
        raise NoTargetError(
            f"{empty} has no step timing: its ranks counted no step (or ran with MLDEBUG_TIMING=0)",
            "Compare runs whose ranks ran an optimizer step (or call mldebug.step()) under "
            "`mldebug run`.",
        )
    write_report(args.json, lambda: json_report(comparison), lambda: text_report(comparison))
    if args.fail_slower is not None and comparison.ratio > args.fail_slower:
        return EXIT_FINDINGS
    return EXIT_OK
