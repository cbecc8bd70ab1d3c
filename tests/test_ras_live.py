"""`mldebug dump` of a real 3-rank gloo job whose ranks name a RAS endpoint (NCCL_RAS_ADDR):
the fake endpoint of tests/ras_fake.py (built from NCCL's protocol; there is no NCCL here)
answers with counts for the job's own pids, and the verdict combines them with the stacks.
`mldebug collect` (the per-node half of `dump --slurm/--hosts`) asks it too and carries the
answer in its node document; the front end's reading of that document judges it with the
stacks. The job's ranks carry a SLURM_JOB_ID of their own (no SLURM runs here) so that
`collect --slurm-job` reads this job alone on a machine other jobs share.

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
from testkit.ports import launcher_port
from testkit.ras_fake import FakeRas, nccl_json

pytestmark = [pytest.mark.multirank, pytest.mark.timeout(400)]

JOB = Path(__file__).parent / "jobs" / "hang_job.py"
NPROC = 3
JOB_ID = "9902201"  # what `collect --slurm-job` picks the job's ranks by


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    fake = FakeRas()
    log = tmp_path_factory.mktemp("ras") / "job.log"
    env = dict(os.environ, NCCL_RAS_ADDR=fake.address, SLURM_JOB_ID=JOB_ID)
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nproc-per-node",
                str(NPROC),
                "--master-port",
                str(launcher_port()),
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
    return [f for f in report["findings"] if "ras" in f["sources"] or f["kind"] == "nccl_ras"]


def test_counts_and_stacks_name_the_rank_behind(job):
    proc, fake, pids = job
    # GIVEN RAS counts where rank 2 launched one all_reduce fewer (JSON, NCCL 2.30)
    counts = {r: {"AllReduce": 7 if r == 2 else 8} for r in range(NPROC)}
    fake.answers["json"] = nccl_json(
        "2.30.7", [(r, "127.0.0.1", pids[r], counts[r]) for r in range(NPROC)]
    )
    # WHEN the job is dumped
    (finding,) = ras_of(dump(proc))
    # THEN rank 2 is behind, by its stack outside any collective and by the counts: one
    # finding, seen by both (the judge merges what RAS and the stacks say of rank 2)
    assert finding["ranks"] == [2] and finding["recipe"] == "rank-outside-collective"
    assert "never reached all_reduce" in finding["summary"]
    assert {"stacks", "ras"} <= set(finding["sources"])
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
    try:
        (finding,) = ras_of(dump(proc))
    finally:
        fake.json_support = True
    assert finding["ranks"] == [2] and {"stacks", "ras"} <= set(finding["sources"])


def test_counts_that_agree_add_nothing(job):
    # GIVEN RAS counts that agree (a healthy communicator, as RAS sees it)
    proc, fake, pids = job
    fake.answers["json"] = nccl_json(
        "2.30.7", [(r, "127.0.0.1", pids[r], {"AllReduce": 8}) for r in range(NPROC)]
    )
    # THEN dump says nothing of RAS (the stacks' own finding stands alone)
    report = dump(proc)
    assert ras_of(report) == [] and report["findings"]


def collect_document(timeout: float = 120) -> tuple[dict, float]:
    """`mldebug collect` of the job, as the front end starts it on a node: its document and
    how long it took."""
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "mldebug", "collect", "--slurm-job", JOB_ID, "--samples", "2"],
        capture_output=True,
        timeout=timeout,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout), time.monotonic() - started


def front_end(document: dict) -> tuple[list[dict], list[str]]:
    """The front end's reading of one node's document, merged as `dump --slurm/--hosts`
    merges them (only the transport, srun or ssh, is left out): findings and notes."""
    from mldebug.cluster.front import Collection
    from mldebug.report.jsonout import snapshot_to_json

    collection = Collection(None)  # type: ignore[arg-type]
    assert collection._take("node-a", json.dumps(document).encode())
    snapshot = collection.snapshot()
    return snapshot_to_json(snapshot)["findings"], collection.notes


def test_collect_carries_the_ras_answer_and_the_front_end_judges_it_with_the_stacks(job):
    proc, fake, pids = job
    # GIVEN RAS counts where rank 2 launched one all_reduce fewer (JSON, NCCL 2.30)
    counts = {r: {"AllReduce": 7 if r == 2 else 8} for r in range(NPROC)}
    fake.answers["json"] = nccl_json(
        "2.30.7", [(r, "127.0.0.1", pids[r], counts[r]) for r in range(NPROC)]
    )
    # WHEN the node's collector runs, and the front end reads what it printed
    document, _ = collect_document()
    assert document["ras"]["source"] == fake.address
    findings, notes = front_end(document)
    # THEN the merged verdict names rank 2, by the counts and its stack outside any collective
    (finding,) = [f for f in findings if "ras" in f["sources"] or f["kind"] == "nccl_ras"]
    assert finding["ranks"] == [2] and {"stacks", "ras"} <= set(finding["sources"])
    assert any(f"node-a {fake.address} answered (NCCL 2.30.7)" in n for n in notes)


def test_collect_with_a_ras_that_never_answers_is_bounded_and_carries_nothing(job):
    proc, fake, pids = job
    # GIVEN an endpoint that accepts and then never answers
    fake.mode = "stall"
    try:
        document, took = collect_document()
    finally:
        fake.mode = "answer"
    # THEN the document says why in one note, carries no answer, and RAS added no finding
    assert document["ras"] is None
    assert any("no answer within the 2 s allowed" in n for n in document["notes"])
    findings, _ = front_end(document)
    assert (
        not [f for f in findings if "ras" in f["sources"] or f["kind"] == "nccl_ras"] and findings
    )
    assert took < 100  # the 2 s bound, with py-spy's samples of 3 ranks on a loaded machine


def test_collect_with_counts_that_agree_adds_nothing(job):
    proc, fake, pids = job
    fake.answers["json"] = nccl_json(
        "2.30.7", [(r, "127.0.0.1", pids[r], {"AllReduce": 8}) for r in range(NPROC)]
    )
    document, _ = collect_document()
    assert document["ras"] is not None
    findings, _ = front_end(document)
    assert (
        not [f for f in findings if "ras" in f["sources"] or f["kind"] == "nccl_ras"] and findings
    )
