"""torch's Flight Recorder as the cross-check, on a real job: 2 gloo ranks under `mldebug run`
train a tiny nn.Linear wrapped in DDP. At the fourth step rank 1 sleeps in Python forever
instead of its forward and backward; rank 0 enters backward, where DDP's gradient all_reduce
(issued by C++, never seen by the agent's Python trace) waits for rank 1. Rank 0's agent has
no traced call pending, so only its Flight Recorder tells that it waits: `mldebug dump --json`
must show rank 0 waiting in all_reduce and name rank 1, with its line, as elsewhere.

The job starts once per module (importing torch in 2 ranks takes a while).
"""

from __future__ import annotations

import json
import textwrap
import time

import pytest
from testkit.jobs import dump_json, start, stop, wait_ready
from testkit.torchfeatures import needs_gloo_flight_recorder

pytestmark = [pytest.mark.long, pytest.mark.multirank, pytest.mark.compat, pytest.mark.timeout(600)]

JOB = textwrap.dedent(
    """\
    import time

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(8, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(4):
        if step == 3:
            print(f"READY {rank}", flush=True)
            while rank == 1:
                time.sleep(0.2)  # ELSEWHERE_LINE
        loss = model(torch.ones(2, 8)).sum()
        loss.backward()  # BACKWARD_LINE
        optimizer.step()
        optimizer.zero_grad()
    """
)


def line_of(marker: str) -> int:
    return next(i for i, line in enumerate(JOB.splitlines(), 1) if marker in line)


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    needs_gloo_flight_recorder()  # torch 2.4 (.ci/compat) records NCCL only
    tmp_path = tmp_path_factory.mktemp("ddp_flight")
    script = tmp_path / "job.py"
    script.write_text(JOB)
    proc, run_dir = start(tmp_path, script, 2)
    try:
        wait_ready(proc, run_dir, 2)
        yield script, run_dir
    finally:
        stop(proc)


def test_rank_0_waits_in_ddps_all_reduce_and_rank_1_is_named_elsewhere(job):
    script, run_dir = job
    # The recorder is read once the step stood still for 5 heartbeats; the first dump that
    # reads it may see a wait of a few seconds, a pause (info); the wait is a warning past
    # that and an error once it lasted the hang threshold.
    deadline = time.monotonic() + 90
    while True:
        code, report = dump_json(run_dir)
        named = [f for f in report["findings"] if "Flight Recorder" in f["summary"]]
        graded = [f for f in named if f["severity"] != "info"]
        if graded or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert graded, report["findings"]
    (finding,) = named
    assert finding["kind"] == "outlier" and finding["ranks"] == [1], finding
    assert finding["severity"] in ("error", "warning")
    elsewhere = f"{script}:{line_of('ELSEWHERE_LINE')}"
    assert finding["location"] == elsewhere
    assert finding["summary"].startswith("rank 1 is not in all_reduce #"), finding["summary"]
    assert "which rank 0 waits in" in finding["summary"]
    assert f"it is at {elsewhere} in <module>" in finding["summary"]
    assert code == 1 or finding["severity"] == "warning"
    ranks = {r["rank"]: r for r in report["ranks"]}
    assert ranks[0]["state"] == "waiting"
    assert ranks[0]["location"] == f"{script}:{line_of('BACKWARD_LINE')}"
    # Rank 0's agent saw no Python call of DDP's all_reduce pending: only its recorder did.
    groups = ranks[0]["collectives"]["groups"]
    for group in groups.values():
        made, done = group.get("enqueued"), group.get("completed")
        assert made is None or (done is not None and done["seq"] == made["seq"])
    state = json.loads((run_dir / "ranks" / "0" / "state.json").read_text())
    last = state["flight_recorder"]["default_pg"]["last"]
    assert last["op"] == "all_reduce" and last["retired"] is False
    assert last["sizes"] == [[36]] and last["dtypes"] == ["Float"]  # the one bucket: 8x4 + 4
    assert state["flight_recorder"]["default_pg"]["pending"] >= 1
    # Rank 1's heartbeat reads its own recorder on its own clock: a beat or two after rank 0's.
    deadline = time.monotonic() + 30
    while True:
        other = json.loads((run_dir / "ranks" / "1" / "state.json").read_text())
        if "flight_recorder" in other or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert other["flight_recorder"]["default_pg"]["pending"] == 0
