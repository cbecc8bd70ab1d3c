"""Every example in examples/ that ends by itself, run under `mldebug run` as its docstring
says, and what mldebug says about it. (The two that hang, skip_collective.py and
mismatched_collectives.py, are read by `mldebug dump` in test_dump_torch.py.)

The four jobs start together in one module fixture: their torch imports overlap. Each is
run with the options its docstring gives (nan_loss.py: --detect-anomaly).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mldebug.analysis.memory import MiB, growth
from mldebug.analysis.nonfinite import nonfinite_findings
from mldebug.collect.agentstate import read_state
from mldebug.collect.eventfiles import EventsReader
from mldebug.files.rundir import hostname, read_manifest

pytestmark = [pytest.mark.long, pytest.mark.multirank]

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
HOST = hostname()
NAMES = ("crash", "nan_loss", "memory_leak", "noisy_output")
OPTIONS = {"nan_loss": ["--detect-anomaly"]}


def line_of(name: str, marker: str) -> int:
    lines = (EXAMPLES / f"{name}.py").read_text().splitlines()
    return next(number for number, line in enumerate(lines, 1) if marker in line)


# Large tensors in mappings of their own, given back when freed: the healthy rank's RSS is
# flat instead of glibc's heap growing and trimming by whole tensors at random (which can
# rise at 8 steps in a row on a loaded machine, and read as a leak).
ENV = {"memory_leak": {"MALLOC_MMAP_THRESHOLD_": str(128 << 10)}}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("examples")
    env = {**os.environ, "MLDEBUG_RUNS_DIR": str(root / "runs"), "NO_COLOR": "1"}
    started = {}
    for name in NAMES:
        run_dir = root / name
        command = [sys.executable, "-m", "mldebug", "run", "--run-dir", str(run_dir)]
        command += ["--nproc-per-node", "2", *OPTIONS.get(name, []), str(EXAMPLES / f"{name}.py")]
        started[name] = (
            subprocess.Popen(
                command,
                env={**env, **ENV.get(name, {})},
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=root,
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


def test_nan_loss_is_found_by_mldebug_not_by_the_script(runs):
    code, out, err, run_dir = runs["nan_loss"]
    # The script checks nothing: it trains on NaN to the end, and exits 0.
    assert code == 0, err
    assert f"[{HOST}:1] step 5 loss nan" in out and f"[{HOST}:0] step 9 loss nan" in out
    called = f"{EXAMPLES / 'nan_loss.py'}:{line_of('nan_loss', 'self.head(self.act(hidden))')}"
    # --detect-anomaly names rank 1, step 5, the module and the line, once, on the console...
    assert (
        f"[{HOST}:1] mldebug: rank 1 step 5: act (SquaredReLU) output became inf, called at "
        f"{called}\n" in err
    ), err
    assert err.count("mldebug: rank 1 ") == 1
    # ...and as the finding dump and attach show (from events.jsonl): rank 0 only received
    # the NaN through DDP's averaged gradients.
    events, bad = EventsReader().read(run_dir)
    assert bad == 0
    (first,) = [e for e in events if e.kind == "nonfinite" and e.rank == 1]
    assert first.step == 5 and dict(first.fields)["module"] == "act"
    (finding,) = nonfinite_findings(events)
    assert finding.ranks == (1,) and finding.location == called
    assert finding.summary.startswith("NaN/Inf from rank 1 at step 5: act (SquaredReLU) output")


def test_memory_leak_is_found_on_the_rank_that_keeps_its_graphs_with_its_rate(runs):
    code, out, err, run_dir = runs["memory_leak"]
    assert code == 0, err
    assert "rss" not in out.lower()  # the script says nothing about its memory
    assert read_manifest(run_dir)["status"] == "succeeded"
    # What dump's finding reads: each rank's memory history in its state.json.
    leaking, healthy = read_state(run_dir, 0), read_state(run_dir, 1)
    found = growth(leaking)
    assert found is not None and 5 * MiB < found.rate < 40 * MiB, leaking.memory_history
    assert growth(healthy) is None, healthy.memory_history
    # The agent's own event (its rule is stricter: each of the last 8 steps, which RSS noise
    # may break) never names the healthy rank.
    events, _ = EventsReader().read(run_dir)
    assert 1 not in [e.rank for e in events if e.kind == "memory_growth"]


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
