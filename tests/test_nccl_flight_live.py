"""`mldebug run --flight-recorder --hang-timeout` on a real job, as a user runs it.

Two gloo ranks make an all_reduce and a broadcast per step; at the third step rank 1 goes
to sleep in Python instead, and rank 0 waits in the all_reduce. The hang watchdog fires,
asks the ranks for torch's Flight Recorder dumps, waits for them (--on-hang stop) and
stops the job. Each rank's agent must have written <run>/fr/rank_<rank> with torch's real
dump, and reading them back must name rank 1 as behind, at the all_reduce's line.
One job for the module (importing torch in 2 ranks takes a while).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from mldebug.model import KIND_FR_BEHIND
from mldebug.nccl.flight import compare_flight_dumps, read_flight_dump, summarize_flight_dump

pytestmark = [pytest.mark.multirank, pytest.mark.timeout(600)]

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


@pytest.fixture(scope="module")
def hung(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fr_live")
    (tmp / "job.py").write_text(JOB)
    command = [sys.executable, "-m", "mldebug", "run", "--run-dir", str(tmp / "run")]
    command += ["--nproc-per-node", "2", "--flight-recorder", "--hang-timeout", "8"]
    proc = subprocess.Popen(
        [*command, "--on-hang", "stop", "job.py"],
        cwd=tmp,
        env={**os.environ, "MLDEBUG_RUNS_DIR": str(tmp / "runs")},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        _out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, err, tmp / "run", tmp / "job.py"


def test_the_watchdog_asks_and_every_rank_writes_its_dump_into_the_run(hung):
    code, err, run, _script = hung
    assert code == 124, err
    assert f"Flight Recorder: each rank writes {run / 'fr'}/rank_<rank>" in err
    names = sorted(os.listdir(run / "fr"))
    assert names == ["rank_0", "rank_1", "request"], names
    for rank in (0, 1):
        assert oct((run / "fr" / f"rank_{rank}").stat().st_mode & 0o777) == "0o600"


def test_the_dumps_read_back_name_the_rank_behind_at_its_line(hung):
    _code, err, run, script = hung
    dumps = [read_flight_dump(str(run / "fr" / f"rank_{rank}")) for rank in (0, 1)]
    assert [d.rank for d in dumps] == [0, 1] and all(d.repaired for d in dumps)
    (finding,) = compare_flight_dumps(dumps)
    assert finding.kind == KIND_FR_BEHIND and finding.ranks == (1,), err
    assert finding.summary == (
        "rank 1 never joined all_reduce #5 of the default group that rank 0 entered; its last is #4"
    )
    assert finding.location == f"{script}:{line_of('ALL_REDUCE')}"  # not the agent's wrapper
    lines = summarize_flight_dump(dumps[0])
    assert "last all_reduce #5 (not completed)" in lines[1], lines


def test_the_hang_report_holds_the_comparison_of_the_dumps(hung):
    _code, err, run, script = hung
    (report,) = sorted((run / "reports").glob("hang-*.json"))
    data = json.loads(report.read_text())
    behind = [f for f in data["findings"] if f["kind"] == KIND_FR_BEHIND]
    assert [f["ranks"] for f in behind] == [[1]], data["findings"]
    assert behind[0]["recipe"] == "rank-behind"
    assert behind[0]["location"] == f"{script}:{line_of('ALL_REDUCE')}"
