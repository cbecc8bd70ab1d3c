"""`mldebug dump --profile`: py-spy's raw output parsed (recorded from a real 2-rank gloo job
whose rank 0 computes 2x as long), the straggler judged from the shares of samples, real
py-spy runs on a live process and on one that is gone, and bad --profile/--rate input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mldebug.analysis.timing_profile import judge_profiles, rank_profile, unsampled_notes
from mldebug.collect.profile import parse_raw, sample_job
from mldebug.model import FAIL_EXITED, RankTarget
from mldebug.model_timing import SampledStacks

DATA = Path(__file__).parent / "data" / "timing"
MLDEBUG = [sys.executable, "-m", "mldebug"]


def recorded(rank: int) -> SampledStacks:
    text = (DATA / f"pyspy_raw_2x_rank{rank}.txt").read_text()
    return SampledStacks(rank, 100 + rank, tuple(parse_raw(text)), 3.0)


def test_raw_lines_become_counted_main_thread_stacks():
    text = (
        "<module> (/job/train.py:9);main (/job/train.py:4) 7\n"
        "_bootstrap (/usr/lib/python3.11/threading.py:1002);run (/x.py:1) 5\n"
        "garbage without a count\n"
        "<module> (/job/train.py:9);main (/job/train.py:4) 2\n"
    )
    assert parse_raw(text) == [
        ((("<module>", "/job/train.py", 9), ("main", "/job/train.py", 4)), 9),
    ]


def test_the_recorded_slow_rank_is_named_with_how_sure():
    table, findings, profiles = judge_profiles([recorded(0), recorded(1)])
    assert [(f.kind, f.ranks) for f in findings] == [("straggler", (0,))]
    assert findings[0].summary.startswith("rank 0 is the straggler: it is inside collectives ")
    assert "standard errors" in findings[0].summary
    assert findings[0].location.startswith("/home/ana/job/straggler.py:5")
    rows = {row.rank: row for row in table.rows}
    assert rows[0].straggler and rows[0].waiting < rows[1].waiting
    assert rows[1].samples == profiles[1].samples > 100


def test_two_ranks_alike_name_nobody():
    # Both ranks as the waiting one was: nobody stands out.
    table, findings, _ = judge_profiles([recorded(1), SampledStacks(2, 7, recorded(1).stacks, 3.0)])
    assert findings == []
    assert table.note.startswith("no rank stands out")


def test_few_samples_are_not_judged():
    few = [SampledStacks(r, r, (((("main", "/job/t.py", 1),), 5),), 1.0) for r in range(2)]
    assert judge_profiles(few)[1] == []


def test_a_rank_that_cannot_be_sampled_is_named_and_the_others_judged():
    gone = SampledStacks(2, 999, failure=FAIL_EXITED, failure_detail="the process exited")
    table, findings, profiles = judge_profiles([recorded(0), recorded(1), gone])
    assert [(f.kind, f.ranks) for f in findings] == [("straggler", (0,))]
    assert unsampled_notes(profiles) == [
        "rank 2 (pid 999) could not be sampled: the process exited"
    ]
    assert rank_profile(gone).samples == 0


def test_real_pyspy_samples_a_live_process_and_names_a_gone_one():
    live = subprocess.Popen([sys.executable, "-c", "while True:\n    sum(range(1000))"])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    try:
        got = sample_job(
            [RankTarget(pid=live.pid, rank=0), RankTarget(pid=dead.pid, rank=1)], 1.0, 50
        )
    finally:
        live.kill()
        live.wait()
    assert got[0].failure is None and sum(count for _, count in got[0].stacks) > 10
    assert got[1].failure == FAIL_EXITED


@pytest.mark.parametrize(
    "options",
    [["--profile", "0"], ["--profile", "1e9"], ["--profile", "nan"], ["--profile", "3", "--rate", "0"],
     ["--profile", "3", "--rate", "100000"]],
)  # fmt: skip
def test_absurd_duration_or_rate_is_one_line_and_exit_2(options):
    done = subprocess.run([*MLDEBUG, "dump", *options], capture_output=True, text=True)
    assert done.returncode == 2
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert "Traceback" not in done.stderr
    assert any(("--profile" in line or "--rate" in line) for line in lines[-1:]), done.stderr
