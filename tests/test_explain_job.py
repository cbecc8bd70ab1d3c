"""`mldebug explain` on a real job's run directory: two gloo ranks under
TORCH_DISTRIBUTED_DEBUG=DETAIL all_reduce tensors of different shapes, and torch 2.13's own
ProcessGroupWrapper says so on both ranks. One job, shared by the module."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.multirank

SCRIPT = textwrap.dedent(
    """
    from datetime import timedelta
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    rank = dist.get_rank()
    t = torch.ones(4 if rank == 0 else 5)  # the shape depends on the rank's data
    dist.all_reduce(t)
    """
)


@pytest.fixture(scope="module")
def mismatch_run(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("explain-job")
    script = folder / "mismatch.py"
    script.write_text(SCRIPT)
    run_dir = folder / "run"
    env = {
        **os.environ,
        "MLDEBUG_RUNS_DIR": str(folder / "runs"),
        "TORCH_DISTRIBUTED_DEBUG": "DETAIL",
    }
    done = subprocess.run(
        [sys.executable, "-m", "mldebug", "run", "--run-dir", str(run_dir)]
        + ["--nproc-per-node", "2", str(script)],
        capture_output=True,
        timeout=300,
        env=env,
    )
    assert done.returncode != 0, done.stderr[-2000:]
    return run_dir


def test_explain_names_both_ranks_their_shapes_and_the_calling_line(mismatch_run):
    done = subprocess.run(
        [sys.executable, "-m", "mldebug", "explain", "--json", str(mismatch_run)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    top = json.loads(done.stdout)["findings"][0]
    assert (top["kind"], top["ranks"], top["recipe"]) == (
        "collective_mismatch",
        [0, 1],
        "mismatched-collectives",
    )
    assert "ALLREDUCE shape [4]" in top["summary"] and "ALLREDUCE shape [5]" in top["summary"]
    assert top["location"].endswith("mismatch.py:9")
    # One finding, resting on each rank's own stderr.
    assert {e.split("/ranks/")[1].split("/")[0] for e in top["evidence"]} == {"0", "1"}


HEALTHY = textwrap.dedent(
    """
    import sys
    from datetime import timedelta
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    for step in range(1, 21):
        t = torch.ones(8)
        dist.all_reduce(t)
        if dist.get_rank() == 0:  # a progress bar, as tqdm draws it
            done = step * 5
            bar = "█" * (step // 2)
            sys.stderr.write(f"\\rtrain: {done:3d}%|{bar:<10}| {step}/20 [00:0{step // 10}<00:01, 9.9it/s]")
    print("loss 0.1234", flush=True)
    dist.destroy_process_group()
    """
)


def test_a_healthy_job_gets_nothing_wrong(tmp_path):
    # Never cry wolf: a job that worked, progress bar and all, exits 0 with no error finding.
    script = tmp_path / "healthy.py"
    script.write_text(HEALTHY)
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "mldebug", "run", "--run-dir", str(run_dir)]
        + ["--nproc-per-node", "2", str(script)],
        capture_output=True,
        timeout=300,
        env={**os.environ, "MLDEBUG_RUNS_DIR": str(tmp_path / "runs")},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    explained = subprocess.run(
        [sys.executable, "-m", "mldebug", "explain", "--json", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert explained.returncode == 0, explained.stdout
    report = json.loads(explained.stdout)
    assert report["sources"], report
    assert not [f for f in report["findings"] if f["severity"] == "error"], report["findings"]
