"""`mldebug attach [TARGET]`: the live terminal UI over a running job.

Targets are those of `mldebug dump`: `--pid` (a rank or its launcher, repeatable), `--run DIR`
(an `mldebug run` directory), or nothing (the newest live `mldebug run`, else the training
processes of this user). `mldebug run --tui` calls `attach_to_run`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path

from mldebug.commands.common import Parser, pid, seconds, split_target
from mldebug.errors import EXIT_USAGE, MldebugError

NO_TTY_REMEDY = (
    "Use `mldebug dump` for a one-shot report on a pipe or in CI (add --json for scripts)."
)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="mldebug attach",
        description="Live view of a multi-rank job: every rank's state and stack, the merged "
        "stack tree, the verdict on top, and the run's logs, events, memory and NCCL files.",
        epilog="Keys: q quit, p pause, s save a report, / filter ranks, enter rank detail, "
        "r recipe, 1-6 tabs, ? all keys, ctrl+p command palette.",
    )
    parser.add_argument(
        "target",
        nargs="?",
        metavar="TARGET",
        help="a pid (rank or launcher) or an `mldebug run` directory",
    )
    parser.add_argument(
        "--pid",
        type=pid,
        action="append",
        default=[],
        metavar="PID",
        help="a rank's or its launcher's pid (repeatable)",
    )
    parser.add_argument("--run", metavar="DIR", help="an `mldebug run` directory")
    parser.add_argument(
        "--interval",
        type=seconds(0, 3600, allow_low=False),
        default=1.0,
        metavar="SECONDS",
        help="seconds between refreshes (default: 1.0)",
    )
    parser.add_argument(
        "--native",
        action="store_true",
        help="read native (C/C++) frames at every refresh (slow; `n` in a "
        "rank's view reads them once instead)",
    )
    return parser


def _is_tty(stream) -> bool:
    try:
        return stream is not None and stream.isatty()
    except (OSError, ValueError):
        return False


def require_tty() -> None:
    if not (_is_tty(sys.stdin) and _is_tty(sys.stdout)):
        raise MldebugError(
            "attach draws a live screen and needs a terminal (no TTY here)",
            NO_TTY_REMEDY,
            exit_code=EXIT_USAGE,
        )


def script_name(cmdline: str) -> str:
    """The training script a rank runs ("train.py"), or "" when the command line has none."""
    for word in cmdline.split():
        if word.endswith(".py"):
            return os.path.basename(word)
    return ""


def job_label(job_targets) -> str:
    """The header line: which job this is, in words a user recognises."""
    from mldebug.ranges import format_ranks

    ranks = [t.rank for t in job_targets.targets if t.rank is not None]
    scripts = [script_name(t.cmdline) for t in job_targets.targets]
    where = job_targets.run_dir or next((s for s in scripts if s), "") or job_targets.job
    size = job_targets.world_size or len(job_targets.targets)
    return f"{where or 'job'} — ranks {format_ranks(ranks) or '?'} of {size}"


def run_app(
    resolve: Callable[[], object],
    *,
    follow: bool,
    run_dir: Path | None,
    interval: float,
    native: bool,
    stop: Callable[[], None] | None,
    job_targets=None,
    label: str = "",
) -> int:
    from mldebug.tui.app import AttachApp
    from mldebug.tui.poller import CollectorPoller

    global _live_app
    poller = CollectorPoller(resolve, native=native, follow=follow, job_targets=job_targets)
    app = AttachApp(poller, interval=interval, run_dir=run_dir, stop=stop, job_name=label)
    _live_app = app
    try:
        code = app.run()
    finally:
        _live_app = None
    return 0 if code is None else int(code)


_live_app = None  # the app on screen, so a signal handler can close it


def request_exit() -> None:
    """Close the live view from a signal handler (SIGTERM, SIGHUP: the terminal is gone)."""
    app = _live_app
    if app is not None:
        app.exit_soon()


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    pids, run = split_target(args.target, args.pid, args.run)
    require_tty()

    from mldebug.targets import resolve_targets

    # Resolve once now so a wrong target fails here, with its message, before the screen.
    job_targets = resolve_targets(pids=pids, run_dir=run)
    run_dir = Path(job_targets.run_dir) if job_targets.run_dir else None
    follow = not pids  # a run or discovery may gain ranks; given pids stay what they are
    if run_dir is not None and follow:

        def resolve():
            return resolve_targets(run_dir=run_dir)
    else:

        def resolve():
            return resolve_targets(pids=pids, run_dir=run)

    return run_app(
        resolve,
        follow=follow,
        run_dir=run_dir,
        interval=args.interval,
        native=args.native,
        stop=None,
        job_targets=job_targets,
        label=job_label(job_targets),
    )


def attach_to_run(run_dir: Path, stop: Callable[[], None], interval: float = 1.0) -> int:
    """The TUI of `mldebug run --tui`: watch the run as its ranks come up.

    On quit the user chooses: stop the job (calls `stop()`), or leave it running. Returns
    the TUI's exit code (0), or EXIT_USAGE without a terminal.
    """
    if not (_is_tty(sys.stdin) and _is_tty(sys.stdout)):
        print(f"mldebug: no terminal for the TUI. {NO_TTY_REMEDY}", file=sys.stderr)
        return EXIT_USAGE
    from mldebug.targets import resolve_targets

    run_dir = Path(run_dir)
    return run_app(
        lambda: resolve_targets(run_dir=run_dir),
        follow=True,
        run_dir=run_dir,
        interval=interval,
        native=False,
        stop=stop,
        label=f"{run_dir} (launched by mldebug run)",
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
