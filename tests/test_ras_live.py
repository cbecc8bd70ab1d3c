"""`mldebug dump` of a real 3-rank gloo job whose ranks name a RAS endpoint (NCCL_RAS_ADDR):
the fake endpoint of tests/ras_fake.py (built from NCCL's protocol; there is no NCCL here)
answers with counts for the job's own pids, and the verdict combines them with the stacks.

Rank 2 sits in load_shard (tests/jobs/hang_job.py straggler), ranks 0-1 wait in all_reduce.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from testkit.ras_fake import FakeRas, nccl_json

from mldebug.launch.env import free_port

pytestmark = [pytest.mark.multirank, pytest.mark.timeout(400)]

JOB = Path(__file__).parent / "jobs" / "hang_job.py"
NPROC = 3


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    fake = FakeRas()
    log = tmp_path_factory.mktemp("ras") / "job.log"
    env = dict(os.environ, NCCL_RAS_ADDR=fake.address)
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nproc-per-node",
                str(NPROC),
                "--master-port",
                str(free_port()),
                str(JOB),
                "straggler",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )
    try:
        deadline = time.monotonic() + 240
        while log.read_text(errors="replace").count("READY") < NPROC:
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.5)
        time.sleep(2)  # ranks 0-1 enter all_reduce after printing READY
        pids = {}
        for child in psutil.Process(proc.pid).children(recursive=True):
            rank = child.environ().get("RANK")
            if rank is not None:
                pids[int(rank)] = child.pid
        yield proc, fake, pids
    finally:
        for child in psutil.Process(proc.pid).children(recursive=True):
            child.kill()
        proc.kill()
        proc.wait(30)
        fake.close()


def dump(proc) -> dict:
    result = subprocess.run(
        [sys.executable, "-m", "mldebug", "dump", "--pid", str(proc.pid), "--json"],
        capture_output=True,
        text=True,
        timeout=180,
    )
    return json.loads(result.stdout)


def ras_of(report: dict) -> list[dict]:
    return [f for f in report["findings"] if f["kind"] == "nccl_ras"]


def test_counts_and_stacks_name_the_rank_behind(job):
    proc, fake, pids = job
    # GIVEN RAS counts where rank 2 launched one all_reduce fewer (JSON, NCCL 2.30)
    counts = {r: {"AllReduce": 7 if r == 2 else 8} for r in range(NPROC)}
    fake.answers["json"] = nccl_json(
        "2.30.7", [(r, "127.0.0.1", pids[r], counts[r]) for r in range(NPROC)]
    )
    # WHEN the job is dumped
    (finding,) = ras_of(dump(proc))
    # THEN rank 2 is behind, by counts and by its stack outside any collective
    assert finding["ranks"] == [2]
    assert "never launched AllReduce #8" in finding["summary"]
    assert "outside any collective" in finding["summary"]
    assert "not completions" in finding["detail"]
    assert "STATUS" in fake.commands


def test_text_answer_naming_the_wrong_side_is_decided_by_the_stacks(job):
    proc, fake, pids = job
    # GIVEN an older NCCL (text only) that names ranks 0-1, the two that launched #8
    fake.json_support = False
    text = (Path(__file__).parent / "data" / "ras" / "text_2.26_mismatch.txt").read_text()
    text = text.replace("4         8        32        32", "1         3         3         3")
    text = text.replace(
        "30 ranks have launched up to operation 640",
        "Rank 2 has launched up to "
        f"operation 7 -- GPU 2 managed by process {pids[2]} on node 127.0.0.1",
    )
    text = text.replace(
        "2 ranks have launched up to operation 641\n", "2 ranks have launched up to operation 8\n"
    )
    text = text.replace(
        "Rank 12 -- GPU 4 managed by process 51012 on node 10.20.0.12",
        f"Rank 0 -- GPU 0 managed by process {pids[0]} on node 127.0.0.1",
    )
    text = text.replace(
        "Rank 13 -- GPU 5 managed by process 51013 on node 10.20.0.12",
        f"Rank 1 -- GPU 1 managed by process {pids[1]} on node 127.0.0.1",
    )
    fake.answers["text"] = text.encode()
    (finding,) = ras_of(dump(proc))
    assert finding["ranks"] == [2] and "outside any collective" in finding["summary"]
    fake.json_support = True


def test_counts_that_agree_add_nothing(job):
    # GIVEN RAS counts that agree (a healthy communicator, as RAS sees it)
    proc, fake, pids = job
    fake.answers["json"] = nccl_json(
        "2.30.7", [(r, "127.0.0.1", pids[r], {"AllReduce": 8}) for r in range(NPROC)]
    )
    # THEN dump says nothing of RAS (the stacks' own finding stands alone)
    report = dump(proc)
    assert ras_of(report) == [] and report["findings"]
