"""`mldebug demo`: start a bundled job that hangs, and show what mldebug finds.

In a terminal it opens the live view (`mldebug run --tui`) on the job; elsewhere (a pipe, CI)
it waits for the hang, prints the `mldebug dump` report once, and stops the job.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from mldebug.commands.common import Parser, count, report_console, seconds
from mldebug.errors import EXIT_INTERRUPTED, EXIT_OK, MldebugError, NoTargetError
from mldebug.model import SEVERITY_ERROR, JobSnapshot

if TYPE_CHECKING:
    from mldebug.launch.supervisor import Supervisor

MAX_DEMO_RANKS = 64  # each rank is a Python process with torch loaded
DEMO_JOB = Path(__file__).resolve().parent.parent / "demos" / "prefetch_hang.py"

INTRO = """\
mldebug demo: {n} ranks train a small model with gloo on the CPU. On the last rank a data
prefetch thread dies silently at step 3, so that rank waits for a batch that never comes
while the others wait in all_reduce. Nothing is printed and nothing crashes: a silent hang.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="mldebug demo", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--nproc-per-node",
        type=count(2, MAX_DEMO_RANKS),
        default=3,
        metavar="N",
        help=f"ranks to start (default 3; 2 to {MAX_DEMO_RANKS})",
    )
    parser.add_argument(
        "--no-tui",
        action="store_true",
        help="print the report once instead of opening the live view",
    )
    parser.add_argument(
        "--timeout",
        type=seconds(0, 24 * 3600, allow_low=False),
        default=180.0,
        metavar="SECONDS",
        help="how long to wait for the hang without the live view (default 180)",
    )
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if importlib.util.find_spec("torch") is None:  # the ranks need it; the CLI does not
        raise MldebugError(
            "the demo job needs PyTorch in this environment",
            "Install it: pip install torch (a CPU build is enough).",
        )
    print(INTRO.format(n=args.nproc_per_node), file=sys.stderr)
    interactive = not args.no_tui and sys.stdin.isatty() and sys.stdout.isatty()
    if interactive:
        from mldebug.commands.run import main as run_main

        job = copy_job(Path(tempfile.mkdtemp(prefix="mldebug-demo-")))
        code = run_main(["--tui", "--nproc-per-node", str(args.nproc_per_node), str(job)])
        return EXIT_OK if code == EXIT_INTERRUPTED else code  # stopped from the TUI: done
    return _report_once(args.nproc_per_node, args.timeout)


def copy_job(folder: Path) -> Path:
    """Put the demo job where the user can open it; there it also reads as user code."""
    job = folder / DEMO_JOB.name
    shutil.copyfile(DEMO_JOB, job)
    return job


def _report_once(nproc: int, timeout: float) -> int:
    from mldebug.files.rundir import create_run_dir
    from mldebug.launch.spec import LaunchSpec
    from mldebug.launch.supervisor import Supervisor
    from mldebug.report.text import print_report

    paths = create_run_dir()
    supervisor = Supervisor(
        LaunchSpec(
            paths=paths,
            command=[sys.executable, str(copy_job(paths.root))],
            nproc=nproc,
            argv=["mldebug", "demo"],
        )
    )
    supervisor.start()
    try:
        print(f"mldebug demo: run directory {paths.root}; waiting for the hang...", file=sys.stderr)
        snapshot = _wait_for_hang(paths.root, nproc, supervisor, timeout)
    finally:
        supervisor.stop()
        supervisor.wait()
    print_report(snapshot, report_console(pipe_width=120))
    print("\nThe same, live: mldebug demo (in a terminal), or mldebug attach while a job runs.")
    return EXIT_OK


def _wait_for_hang(
    run_dir: Path, nproc: int, supervisor: Supervisor, timeout: float
) -> JobSnapshot:
    """Dump the job every few seconds until the verdict names a problem."""
    from mldebug.observe.pyspy import observe_once
    from mldebug.targets import resolve_targets

    deadline = time.monotonic() + timeout
    snapshot = None
    while time.monotonic() < deadline:
        if supervisor.done:
            raise MldebugError(
                "the demo job ended before it hung", f"Its output is in {run_dir}/ranks/."
            )
        try:
            job = resolve_targets(run_dir=run_dir)
        except NoTargetError:
            job = None  # ranks not up yet
        if job is not None and len(job.targets) == nproc:
            snapshot, _ = observe_once(job)
            if any(f.severity == SEVERITY_ERROR for f in snapshot.findings):
                return snapshot
        time.sleep(2.0)
    if snapshot is None:
        raise MldebugError(
            f"the demo job's ranks did not come up within {timeout:.0f} s",
            f"Look at their output in {run_dir}/ranks/.",
        )
    return snapshot
