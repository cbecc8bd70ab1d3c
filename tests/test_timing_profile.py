"""`mldebug dump --profile`: py-spy's raw output parsed (recorded from a real 2-rank gloo job
whose rank 0 computes 2x as long), the straggler judged from the shares of samples, real
py-spy runs on a live process and on one that is gone, and bad --profile/--rate input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mldebug.analysis.timing_profile import judge_profiles, rank_profile, unsampled_notes
from mldebug.collect.profile import parse_raw, sample_job
from mldebug.model import FAIL_EXITED, RankTarget
from mldebug.model.timing import SampledStacks

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


WORK = (("<module>", "/home/ana/job/train.py", 90), ("work", "/home/ana/job/train.py", 55))
WAIT = (
    ("<module>", "/home/ana/job/train.py", 90),
    ("all_reduce", "/home/ana/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", 3252),
)  # fmt: skip
PAUSE = (("<module>", "/home/ana/job/train.py", 90), ("checkpoint", "/home/ana/job/train.py", 70))
STACKS = (WORK, WAIT, PAUSE)


def ordered(rank: int, pattern: list[int]) -> SampledStacks:
    """A rank's samples in order (50 a second for 10 s), as indexes into STACKS."""
    counts = [(STACKS[i], pattern.count(i)) for i in range(3)]
    return SampledStacks(rank, rank, tuple(counts), 10.0, timeline=tuple(pattern))


def steps(waiting: int, total: int = 10, seconds: int = 10) -> list[int]:
    """Steps of `total` samples, `waiting` of them in all_reduce."""
    return ([0] * (total - waiting) + [1] * waiting) * (50 * seconds // total)


def test_the_speedscope_timeline_of_the_main_thread_is_kept_in_order():
    text = (DATA / "pyspy_speedscope_toy.json").read_text()
    from mldebug.collect.profile import parse_speedscope

    pid = int(json.loads(text)["profiles"][0]["name"].split()[1])
    stacks, timeline = parse_speedscope(text, pid)
    assert sum(count for _, count in stacks) == len(timeline) == 19
    names = [stacks[i][0][-1][0] for i in timeline]
    assert "b" in names  # the busy loop, in the order sampled
    assert parse_speedscope(text, pid + 1) == ([], ())  # no such thread: nothing


def test_a_rank_that_pauses_now_and_then_is_not_the_straggler():
    # Rank 0 writes a checkpoint 1 s in every 4; the others wait for it in all_reduce then.
    pause = ([2] * 50 + steps(3, seconds=3)[:150]) * 3
    waiting = ([1] * 50 + steps(3, seconds=3)[:150]) * 3
    sampled = [ordered(0, pause), ordered(1, waiting), ordered(2, waiting)]
    table, findings, _ = judge_profiles(sampled)
    assert findings == []
    # Judged without the order, the same samples would have named rank 0.
    unordered = [SampledStacks(s.rank, s.pid, s.stacks, s.seconds) for s in sampled]
    assert [f.ranks for f in judge_profiles(unordered)[1]] == [(0,)]


def test_a_real_healthy_sample_with_checkpoint_pauses_names_nobody():
    # 5 s of py-spy speedscope samples of a healthy 4-rank job (examples/straggler.py, ±10%
    # jitter, rank 0 pausing 1 s every 25 steps), recorded on a loaded 2-core machine: rank 0
    # paused in most of the slices' middle, the others waited then; elsewhere they are alike.
    from mldebug.collect.profile import parse_speedscope

    sampled = []
    for rank in range(4):
        text = (DATA / f"pyspy_healthy_checkpoint_rank{rank}.json").read_text()
        stacks, timeline = parse_speedscope(text, 3472 + rank)
        sampled.append(SampledStacks(rank, 3472 + rank, tuple(stacks), 5.0, timeline=timeline))
    assert judge_profiles(sampled)[1] == []
    # The median slice alone (yesterday's rule) named rank 0 on it.
    from mldebug.analysis import timing_profile

    steady = timing_profile.STEADY
    timing_profile.STEADY = 0.0
    try:
        assert [f.ranks for f in judge_profiles(sampled)[1]] == [(0,)]
    finally:
        timing_profile.STEADY = steady


def test_a_rank_slow_in_every_slice_is_the_straggler():
    sampled = [ordered(0, steps(0)), ordered(1, steps(3)), ordered(2, steps(3))]
    _, findings, _ = judge_profiles(sampled)
    assert [(f.kind, f.ranks) for f in findings] == [("straggler", (0,))]


LOAD = (
    ("<module>", "/home/ana/job/train.py", 90),
    ("__next__", "/home/ana/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py", 733),
)  # fmt: skip


def shares_of(rank: int, work: int, wait: int, load: int) -> SampledStacks:
    """A rank's 500 samples in order, each twentieth: `work`, `wait`, `load` of them."""
    pattern = ([0] * work + [1] * wait + [2] * load) * 25
    stacks = ((WORK, pattern.count(0)), (WAIT, pattern.count(1)), (LOAD, pattern.count(2)))
    return SampledStacks(rank, rank, stacks, 10.0, timeline=tuple(pattern))


def test_a_slow_rank_whose_loading_is_a_little_slower_too_is_the_straggler():
    # On a busy node: rank 0 computes far longer (the others wait half their samples) and
    # its loading share is 15% more than theirs; its extra time is compute, not data.
    sampled = [shares_of(0, 13, 0, 7), shares_of(1, 6, 10, 4), shares_of(2, 6, 10, 4)]
    assert [(f.kind, f.ranks) for f in judge_profiles(sampled)[1]] == [("straggler", (0,))]


def test_a_rank_whose_extra_time_is_loading_is_input_bound():
    sampled = [shares_of(0, 6, 0, 14), shares_of(1, 6, 10, 4), shares_of(2, 6, 10, 4)]
    assert [(f.kind, f.ranks) for f in judge_profiles(sampled)[1]] == [("input_bound", (0,))]
