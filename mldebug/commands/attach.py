"""`mldebug attach [TARGET]`: the live terminal UI over a running job.

Targets are those of `mldebug dump`, parsed by the same code (mldebug.commands.common):
`--pid` (a rank or its launcher, repeatable), `--run DIR` (an `mldebug run` directory), a bare
TARGET (either), or nothing (the newest live `mldebug run`, else the training processes of
this user). `mldebug run --tui` calls `attach_to_run` with a `LiveView` it keeps, so that its
signal handler can close the view.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from mldebug.commands.common import (
    CLUSTER_HELP,
    TARGET_HELP,
    add_cluster_arguments,
    add_duration,
    add_target_arguments,
    cluster_spec,
    command_parser,
    target_of,
)
from mldebug.errors import EXIT_USAGE, MldebugError
from mldebug.model import JobTargets

if TYPE_CHECKING:
    from typing import Any

    from mldebug.cluster.front import ClusterSpec
    from mldebug.tui.app import AttachApp
    from mldebug.tui.feeds import Poller

KEYS_HELP = """\
keys: q quit, p pause, s save a report, / filter ranks, enter rank detail,
  r recipe, 1-6 tabs, ? all keys, ctrl+p command palette

exit status:
  0    quit with q
  2    bad command line (a bad TARGET, --pid or --interval), or no terminal
  3    nothing to look at: no such pid, no job found, several jobs found
  4    no permission: another user's pid
"""
NO_TTY_REMEDY = (
    "Use `mldebug dump` for a one-shot report on a pipe or in CI (add --json for scripts)."
)


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser(
        "attach",
        "Live view of a multi-rank job: every rank's state and stack, the merged\n"
        "stack tree, the verdict on top, and the run's logs, events, memory and NCCL files.",
        f"{TARGET_HELP}\n{CLUSTER_HELP}\n{KEYS_HELP}",
    )
    add_target_arguments(parser)
    add_cluster_arguments(parser)
    add_duration(
        parser, "--interval", 3600, 1.0, "seconds between refreshes (default: 1.0)", "SECONDS"
    )
    parser.add_argument(
        "--native",
        action="store_true",
        help="read native (C/C++) frames at every refresh (slow; `n` in a "
        "rank's view reads them once instead)",
    )
    return parser


def _is_tty(stream: Any) -> bool:  # sys.stdin or sys.stdout, which may be None
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


def job_label(job_targets: JobTargets) -> str:
    """The header line: which job this is, in words a user recognises."""
    from mldebug.ranges import format_ranks

    ranks = [t.rank for t in job_targets.targets if t.rank is not None]
    scripts = [script_name(t.cmdline) for t in job_targets.targets]
    where = job_targets.run_dir or next((s for s in scripts if s), "") or job_targets.job
    size = job_targets.world_size or len(job_targets.targets)
    return f"{where or 'job'} — ranks {format_ranks(ranks) or '?'} of {size}"


class LiveView:
    """A handle on the live view while it is on screen, held by whoever started it: its
    `close()` may be called from a signal handler (SIGTERM, SIGHUP: the terminal is gone)."""

    def __init__(self) -> None:
        self._app: AttachApp | None = None

    def close(self) -> None:
        """Close the view if it is up (thread-safe; nothing happens otherwise)."""
        app = self._app
        if app is not None:
            app.exit_soon()

    def run(self, app: AttachApp) -> int:
        self._app = app
        try:
            code = app.run()
        finally:
            self._app = None
        return 0 if code is None else int(code)


def run_app(
    resolve: Callable[[], JobTargets],
    *,
    follow: bool,
    run_dir: Path | None,
    interval: float,
    native: bool,
    stop: Callable[[], None] | None,
    job_targets: JobTargets | None = None,
    label: str = "",
    view: LiveView | None = None,
) -> int:
    from mldebug.live.poller import CollectorPoller

    poller = CollectorPoller(resolve, native=native, follow=follow, job_targets=job_targets)
    app = live_app(poller, interval=interval, run_dir=run_dir, stop=stop, job_name=label)
    return (view or LiveView()).run(app)


def live_app(poller: Poller, run_dir: Path | None = None, **options: Any) -> AttachApp:
    """The live view over `poller`, handed the real readers of what it shows besides the
    stacks: the run directory's files (when there is one) and the frames' source lines.
    options: AttachApp's (interval, stop, job_name, clock, read_paste)."""
    from mldebug.explain.engine import sure_recipes
    from mldebug.live.runfiles import RunFilesReader
    from mldebug.live.sources import SourceLines
    from mldebug.tui.app import AttachApp

    files = RunFilesReader(run_dir) if run_dir is not None else None
    return AttachApp(
        poller,
        run_dir=run_dir,
        files=files,
        sources=SourceLines(),
        **{"read_paste": sure_recipes, **options},
    )


def main(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    pids, run = target_of(parser, args)
    spec = cluster_spec(parser, args, deadline=30.0)
    require_tty()
    if spec is not None:
        return _attach_cluster(spec, args.interval)

    from mldebug.targets import resolve_targets

    # Resolve once now so a wrong target fails here, with its message, before the screen.
    job_targets = resolve_targets(pids=pids, run_dir=run)
    run_dir = Path(job_targets.run_dir) if job_targets.run_dir else None
    follow = not pids  # a run or discovery may gain ranks; given pids stay what they are
    if run_dir is not None and follow:

        def resolve() -> JobTargets:
            return resolve_targets(run_dir=run_dir)
    else:

        def resolve() -> JobTargets:
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


def _attach_cluster(spec: ClusterSpec, interval: float) -> int:
    """The live view of a job on several nodes: each refresh collects every node again."""
    from mldebug.cluster.front import ClusterPoller, collect_cluster
    from mldebug.cluster.hostlist import compress

    first, _ = collect_cluster(spec)  # a wrong job or host list fails here, with its message
    if spec.k8s is not None:
        label = spec.k8s.target.label()
    else:
        label = compress(list(spec.hosts)) if spec.hosts else f"SLURM job {spec.slurm}"
    app = live_app(ClusterPoller(spec, first), interval=interval, job_name=label)
    return LiveView().run(app)


def attach_to_run(
    run_dir: Path,
    stop: Callable[[], None],
    interval: float = 1.0,
    view: LiveView | None = None,
) -> int:
    """The TUI of `mldebug run --tui`: watch the run as its ranks come up.

    On quit the user chooses: stop the job (calls `stop()`), or leave it running. `view`:
    the caller's handle, to close the TUI when the job is stopped from outside. Returns the
    TUI's exit code (0), or EXIT_USAGE without a terminal.
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
        view=view,
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
