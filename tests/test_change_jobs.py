"""Change over time, for real: gloo ranks running examples/slows_down.py, judged while they run.

GIVEN two jobs started together (one module-scoped fixture: importing torch in the ranks is
what takes the time, so they share it):
  * `mldebug run`, 3 ranks, every rank's DataLoader gets 10x slower from step 60 on
    (8 ms -> 80 ms a batch);
  * `mldebug run`, 2 healthy ranks with an evaluation (40 batches, no optimizer step) every
    25 steps and a 1.5 s checkpoint pause every 40 steps;
  * `mldebug run`, 2 ranks, the same slowdown in a loop that updates its weights by hand (no
    optimizer: the program counts no step);
THEN `mldebug run` says on its console that every rank's step got slower from step ~60,
waiting for data (and records it in events.jsonl); `dump` has the same finding, with no
straggler and no error; the healthy job gets no change finding over several dumps and no
console line; the loop without steps is judged on its collectives' cadence; `mldebug compare` of the two runs says the data wait is what grew.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from testkit.jobs import dump_json, start, stop, wait_ready

from mldebug import cli

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "slows_down.py"
PATH_ENV = {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
SLOW_FROM = 60
pytestmark = [pytest.mark.multirank, pytest.mark.timeout(600)]


def console(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def steps_done(run_dir: Path, rank: int = 0) -> int:
    state = run_dir / "ranks" / str(rank) / "state.json"
    try:
        return int(json.loads(state.read_text()).get("step") or 0)
    except (OSError, ValueError):
        return 0


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("changejobs")
    started, logs = {}, {}
    for name, nproc, args in (
        ("slowing", 3, ("--slow-from", str(SLOW_FROM), "--data-ms", "1", "--slow-data-ms", "10")),
        ("cadence", 2, ("--slow-from", str(SLOW_FROM), "--data-ms", "1", "--slow-data-ms", "10",
                        "--hand-update")),
        ("healthy", 2, ("--eval-every", "25", "--eval-batches", "40", "--checkpoint-every", "40",
                        "--checkpoint-seconds", "1.5")),
    ):  # fmt: skip
        logs[name] = folder / f"{name}.console"
        with logs[name].open("wb") as err:
            started[name] = start(
                folder,
                EXAMPLE,
                nproc,
                name=name,
                args=args,
                stderr=err,
                env={"NO_COLOR": "1", "COLUMNS": "400", **PATH_ENV},
            )
    try:
        for name, (proc, run_dir) in started.items():
            wait_ready(proc, run_dir, 3 if name == "slowing" else 2, marker="READY")
        yield {name: (run_dir, logs[name]) for name, (_, run_dir) in started.items()}
    finally:
        stop(*(proc for proc, _ in started.values()))


def test_an_all_rank_data_slowdown_mid_run_is_named_as_a_change_over_time(jobs):
    run_dir, log = jobs["slowing"]
    # WHEN the job has run well past step 60 THEN its console says so, once.
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and "a lasting change over the run" not in console(log):
        time.sleep(1)
    lines = [line for line in console(log).splitlines() if "lasting change" in line]
    assert len(lines) == 1, console(log)[-3000:]
    line = lines[0]
    assert line.startswith("mldebug: from step ~"), line
    assert SLOW_FROM - 8 <= int(line.split("~")[1].split()[0]) <= SLOW_FROM + 8, line
    assert "every rank's step takes" in line and "waiting for data" in line
    assert "DataLoader(SlowingDataset, num_workers=0)" in line
    assert "MLDEBUG_CHANGE=0 silences this line" in line
    events = (run_dir / "ranks" / "1" / "events.jsonl").read_text().splitlines()
    assert any(json.loads(e)["kind"] == "slowdown" for e in events if e)
    # ...and `dump` has the finding, no straggler and no error.
    code, report = dump_json(run_dir)
    kinds = {f["kind"]: f for f in report["findings"]}
    assert "slowdown" in kinds, report["findings"]
    assert kinds["slowdown"]["ranks"] == [0, 1, 2]
    assert kinds["slowdown"]["severity"] == "warning"
    assert "straggler" not in kinds
    assert [f for f in report["findings"] if f["severity"] == "error"] == []
    assert code == 0


def test_a_loop_without_steps_is_judged_on_its_collectives_cadence(jobs):
    run_dir, log = jobs["cadence"]
    deadline = time.monotonic() + 180
    found: list = []
    while time.monotonic() < deadline and not found:
        _, report = dump_json(run_dir)
        found = [f for f in report["findings"] if f["kind"] == "slowdown"]
        time.sleep(2)
    assert found, report["findings"]
    assert found[0]["ranks"] == [0, 1]
    assert found[0]["summary"].startswith("from collective ~")
    assert "every rank's collective takes" in found[0]["summary"]
    assert "waiting for data" in found[0]["summary"]


def test_a_healthy_job_with_evaluation_and_checkpoint_pauses_stays_silent(jobs):
    run_dir, log = jobs["healthy"]
    # Past two evaluations and two checkpoint pauses, then a dump every few seconds.
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and steps_done(run_dir) < 90:
        time.sleep(1)
    assert steps_done(run_dir) >= 90
    for _ in range(3):
        _, report = dump_json(run_dir)
        assert [f for f in report["findings"] if f["kind"] == "slowdown"] == []
        time.sleep(2)
    assert "lasting change" not in console(log)


def test_compare_says_the_data_wait_is_what_grew(jobs, capsys):
    healthy, _ = jobs["healthy"]
    slowing, _ = jobs["slowing"]
    assert cli.main(["compare", "--json", str(healthy), str(slowing)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["slower"][0] == "data", report
    assert report["ratio"] > 1.5
    assert cli.main(["compare", str(healthy), str(slowing)]) == 0
    text = capsys.readouterr().out
    assert "slower than A's; slower: waiting for data" in text
    assert "itself slowed down from step ~" in text
