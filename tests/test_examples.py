"""Every example in examples/ that ends by itself, run under `mldebug run` as its docstring
says, and what mldebug says about it. (The two that hang, skip_collective.py and
mismatched_collectives.py, are read by `mldebug dump` in test_dump_torch.py.)

The four jobs start together in one module fixture: their torch imports overlap.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from mldebug.rundir import hostname, read_manifest

pytestmark = pytest.mark.multirank

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
HOST = hostname()
NAMES = ("crash", "nan_loss", "memory_leak", "noisy_output")


def line_of(name: str, marker: str) -> int:
    lines = (EXAMPLES / f"{name}.py").read_text().splitlines()
    return next(number for number, line in enumerate(lines, 1) if marker in line)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("examples")
    env = {**os.environ, "MLDEBUG_RUNS_DIR": str(root / "runs"), "NO_COLOR": "1"}
    started = {}
    for name in NAMES:
        run_dir = root / name
        command = [sys.executable, "-m", "mldebug", "run", "--run-dir", str(run_dir)]
        command += ["--nproc-per-node", "2", str(EXAMPLES / f"{name}.py")]
        started[name] = (
            subprocess.Popen(
                command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=root
            ),
            run_dir,
        )
    done = {}
    for name, (proc, run_dir) in started.items():
        out, err = proc.communicate(timeout=400)
        done[name] = (proc.returncode, out.decode(), err.decode(), run_dir)
    return done


def test_crash_names_rank_1_its_exception_and_line(runs):
    code, out, err, run_dir = runs["crash"]
    assert code == 1, err
    raised = line_of("crash", "raise RuntimeError")
    assert (
        f"root cause (first failure): rank 1 on {HOST}: RuntimeError: corrupt sample in "
        "shard 1 at step 3" in err
    )
    assert f"raised at {EXAMPLES / 'crash.py'}:{raised}" in err
    assert "what to do next: mldebug recipes rank-crash" in err
    manifest = read_manifest(run_dir)
    assert manifest["status"] == "failed" and manifest["first_failure"]["rank"] == 1


def test_nan_loss_names_the_rank_whose_loss_turned_nan(runs):
    code, out, err, run_dir = runs["nan_loss"]
    assert code == 1, err
    raised = line_of("nan_loss", "raise FloatingPointError")
    assert (
        f"root cause (first failure): rank 1 on {HOST}: FloatingPointError: loss is NaN at "
        "step 5 on rank 1" in err
    )
    assert f"raised at {EXAMPLES / 'nan_loss.py'}:{raised}" in err
    assert f"[{HOST}:1] step 5 loss nan" in out


def test_memory_leak_runs_to_the_end_with_its_growth_on_the_console(runs):
    code, out, err, run_dir = runs["memory_leak"]
    assert code == 0, err
    for rank in (0, 1):
        peaks = [
            float(m)
            for m in re.findall(rf"^\[{HOST}:{rank}\] step \d+ .* peak rss (\d+) MiB$", out, re.M)
        ]
        assert len(peaks) == 7 and peaks[-1] > peaks[0] + 100, out
    assert read_manifest(run_dir)["status"] == "succeeded"


def test_noisy_output_reaches_the_console_as_whole_prefixed_lines(runs):
    code, out, err, run_dir = runs["noisy_output"]
    assert code == 0, err
    for rank in (0, 1):
        prefix = f"[{HOST}:{rank}] "
        assert f"{prefix}a line written in pieces (rank {rank})\n" in out
        assert f"{prefix}a C-level write to fd 1 from rank {rank}\n" in out
        assert f"{prefix}progress [####################] 40/40\n" in err
        assert f"{prefix}bytes that are not UTF-8: \ufffd\ufffd\ufffd end\n" in err
        # The \r progress bar is throttled: far fewer lines than its 41 states.
        assert err.count(f"{prefix}progress [") < 20
        # The raw bytes are kept as the rank wrote them.
        raw = (run_dir / "ranks" / str(rank) / "stderr.log").read_bytes()
        assert b"\xff\xfe\xfa" in raw and raw.count(b"\rprogress [") == 41
    lines = [line for line in (out + err).splitlines() if line]
    assert all(line.startswith(f"[{HOST}:") or line.startswith("mldebug") for line in lines)
