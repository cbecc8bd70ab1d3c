"""`mldebug run --flight-recorder --hang-timeout` on a real job, as a user runs it.

Two gloo ranks make an all_reduce and a broadcast per step; at the third step rank 1 goes
to sleep in Python instead, and rank 0 waits in the all_reduce. The hang watchdog fires,
asks the ranks for torch's Flight Recorder dumps and waits for them before its report.
Each rank's agent must have written <run>/fr/rank_<rank> with torch's real dump; reading
them back (and the hang report) must name rank 1 as behind, at the all_reduce's line. Then
a user's `touch <run>/fr/request` must get fresh dumps from both ranks.
One job for the module (importing torch in 2 ranks takes a while).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from testkit.torchfeatures import needs_gloo_flight_recorder

from mldebug.flight import compare_flight_dumps, read_flight_dump, summarize_flight_dump
from mldebug.model import KIND_OUTLIER

pytestmark = [pytest.mark.multirank, pytest.mark.compat, pytest.mark.timeout(600)]

JOB = textwrap.dedent(
    """\
    import time

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    grad = torch.ones(8)
    for step in range(3):
        if step == 2 and rank == 1:
            while True:
                time.sleep(0.2)  # ELSEWHERE
        dist.all_reduce(grad)  # ALL_REDUCE
        dist.broadcast(grad, src=0)
    """
)


def line_of(marker: str) -> int:
    return next(i for i, line in enumerate(JOB.splitlines(), 1) if marker in line)


def wait_for(check, seconds: float, proc: subprocess.Popen, what: str):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        if proc.poll() is not None:
            pytest.fail(f"the job ended with {proc.returncode} before {what}")
        time.sleep(0.2)
    pytest.fail(f"no {what} within {seconds:g} s")


def mtimes(fr: Path) -> dict[int, int]:
    return {r: (fr / f"rank_{r}").stat().st_mtime_ns for r in (0, 1) if (fr / f"rank_{r}").exists()}


@pytest.fixture(scope="module")
def hung(tmp_path_factory):
    needs_gloo_flight_recorder()  # torch 2.4 (.ci/compat) records NCCL only
    """GIVEN the job under `mldebug run --flight-recorder --hang-timeout 8` (it keeps
    running after the report); WHEN the watchdog fired, and then a user touched the
    request file; THEN what the run directory and the console held at each point."""
    tmp = tmp_path_factory.mktemp("fr_live")
    (tmp / "job.py").write_text(JOB)
    run, fr, err_path = tmp / "run", tmp / "run" / "fr", tmp / "stderr.txt"
    command = [sys.executable, "-m", "mldebug", "run", "--run-dir", str(run)]
    command += ["--nproc-per-node", "2", "--flight-recorder", "--hang-timeout", "8"]
    with open(err_path, "wb") as err:
        proc = subprocess.Popen(
            [*command, "job.py"],
            cwd=tmp,
            env={**os.environ, "MLDEBUG_RUNS_DIR": str(tmp / "runs")},
            stdout=subprocess.DEVNULL,
            stderr=err,
            start_new_session=True,
        )
    try:
        said = "\n  Flight Recorder: each rank writes"  # under the watchdog's verdict
        wait_for(lambda: said in err_path.read_text(), 240, proc, "hang report")
        after_watchdog = sorted(os.listdir(fr))
        before = mtimes(fr)
        time.sleep(0.05)
        (fr / "request").touch()  # the user's request
        rewritten = wait_for(
            lambda: all(mtimes(fr).get(r, 0) > before.get(r, 0) for r in (0, 1)),
            60,
            proc,
            "dumps on the user's request",
        )
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return {
        "err": err_path.read_text(),
        "run": run,
        "script": tmp / "job.py",
        "after_watchdog": after_watchdog,
        "rewritten": rewritten,
    }


def test_the_watchdog_asks_and_every_rank_writes_its_dump_into_the_run(hung):
    run = hung["run"]
    assert f"\n  Flight Recorder: each rank writes {run / 'fr'}/rank_<rank>\n" in hung["err"]
    assert hung["after_watchdog"] == ["rank_0", "rank_1", "request"]
    for rank in (0, 1):
        assert oct((run / "fr" / f"rank_{rank}").stat().st_mode & 0o777) == "0o600"


def test_touching_the_request_file_makes_every_rank_dump_again(hung):
    fr = hung["run"] / "fr"
    said = f"Flight Recorder: each rank writes {fr}/rank_<rank> on `touch {fr}/request` and "
    assert said + "when the hang watchdog fires" in hung["err"]  # told at the start
    assert hung["rewritten"]  # both ranks' files are newer than the watchdog's dumps
    assert sorted(os.listdir(hung["run"] / "fr")) == ["rank_0", "rank_1", "request"]


def test_the_dumps_read_back_name_the_rank_behind_at_its_line(hung):
    run, script = hung["run"], hung["script"]
    dumps = [read_flight_dump(str(run / "fr" / f"rank_{rank}")) for rank in (0, 1)]
    assert [d.rank for d in dumps] == [0, 1] and all(d.repaired for d in dumps)
    (finding,) = compare_flight_dumps(dumps)
    assert finding.kind == KIND_OUTLIER and finding.ranks == (1,)
    assert finding.summary == (
        f"rank 1 never called all_reduce #5 ({script}:{line_of('ALL_REDUCE')}); rank 0 waits in it"
    )
    assert finding.location == f"{script}:{line_of('ALL_REDUCE')}"  # not the agent's wrapper
    lines = summarize_flight_dump(dumps[0])
    assert "last all_reduce #5 (not completed)" in lines[1], lines


def test_the_hang_report_holds_the_comparison_of_the_dumps(hung):
    run, script = hung["run"], hung["script"]
    (report,) = sorted((run / "reports").glob("hang-*.json"))
    data = json.loads(report.read_text())
    behind = [f for f in data["findings"] if f["kind"] == KIND_OUTLIER]
    assert [f["ranks"] for f in behind] == [[1]], data["findings"]
    assert behind[0]["recipe"] == "rank-outside-collective"
    # the agent and the dumps said the same: one finding, seen by both, at the culprit's line
    assert {"agent", "flight_recorder"} <= set(behind[0]["sources"]), behind[0]
    assert behind[0]["location"] == f"{script}:{line_of('ELSEWHERE')}"
    assert behind[0]["collective"]["seq"] == 5 and behind[0]["waiting"] == [0]
