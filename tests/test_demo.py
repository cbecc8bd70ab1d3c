"""`mldebug demo` is the README's first command: it must find its own hang."""

import os
import re
import subprocess
import sys

import pytest

from mldebug.analysis.frames import is_user_frame
from mldebug.model import Frame

pytestmark = pytest.mark.multirank


def test_demo_without_a_terminal_prints_the_verdict(tmp_path):
    env = {**os.environ, "MLDEBUG_RUNS_DIR": str(tmp_path / "runs"), "NO_COLOR": "1"}
    # GIVEN no terminal, WHEN the demo runs
    done = subprocess.run(
        [sys.executable, "-m", "mldebug", "demo", "--nproc-per-node", "2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    # THEN the report names the rank whose prefetch thread died, at its line, and what the
    # others wait in
    source = (tmp_path / "runs").glob("*/prefetch_hang.py")
    job = next(source)
    blocked = next(
        i
        for i, line in enumerate(job.read_text().splitlines(), 1)
        if "return batches.get()" in line
    )
    reduce = next(
        i for i, line in enumerate(job.read_text().splitlines(), 1) if "dist.all_reduce" in line
    )
    # Not a terminal: lines of 120 columns; a long temporary path (a worker's) can put a
    # break anywhere, so the verdict and what it must say are compared without white space.
    verdict = _squeezed(done.stdout.split("Ranks by stack")[0])
    where = re.escape(str(job))
    # From the ranks' agents (which call rank 1 missed) once rank 0 has waited a heartbeat,
    # from the stacks before that: either way rank 1, its line, and what rank 0 waits in.
    by_agents = (
        rf"rank 1 never called all_reduce #\d+ \({where}:{reduce}\); it is at "
        rf"{where}:{blocked} in next_batch, while rank 0 waits for it"
    )
    by_stacks = (
        rf"rank 1 never reached all_reduce: it is stuck in next_batch \({where}:{blocked}\), "
        rf"while rank 0 waits in all_reduce at average_gradients \({where}:{reduce}\)"
    )
    assert re.search(_squeezed(f"{by_agents}|{by_stacks}"), verdict), done.stdout
    # AND the verdict names the thread rank 1 lost, which rank 0 still runs
    lost = "rank 1 has no thread running prefetch (prefetch_hang.py), which rank 0 has"
    assert _squeezed(lost) in verdict, done.stdout
    # AND the job is stopped: no rank of it is left
    left = subprocess.run(["pgrep", "-f", str(job)], capture_output=True, text=True)
    assert left.stdout == ""


def test_code_under_a_folder_named_mldebug_is_user_code():
    run_dir_job = "/home/me/.local/state/mldebug/runs/1/prefetch_hang.py"
    assert is_user_frame(Frame("next_batch", run_dir_job, 28))
    import mldebug.agent

    assert not is_user_frame(Frame("start", mldebug.agent.__file__, 1))


def _squeezed(text: str) -> str:
    """The text without white space (a pattern's escaped spaces included)."""
    return re.sub(r"\\? |\s+", "", text)
