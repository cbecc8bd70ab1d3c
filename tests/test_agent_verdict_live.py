"""The verdict from the agents on a real job: 3 gloo ranks under `mldebug run --hang-timeout 4`,
the NCCL case on CPU. Ranks 0 and 1 make `all_reduce(async_op=True)` and then spin in Python on
`work.is_completed()` (as a rank spins at `.item()` after an NCCL collective that never
completes); rank 2 never makes the call and loops elsewhere. Every rank burns CPU and no stack
shows a collective, so the stacks alone read as a working job; `mldebug dump --json` must give
an error naming rank 2 and its line, from the agents' state.json.

The job starts once per module (importing torch in 3 ranks takes a while).
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
from testkit.jobs import dump_json_until, running_job
from testkit.jobs import line_of as marked_line

PACKAGE = Path(__file__).resolve().parent.parent / "mldebug"
pytestmark = [
    pytest.mark.multirank,
    pytest.mark.compat,  # .ci/compat: the hang verdict by sequence number
    pytest.mark.timeout(600),
    pytest.mark.skipif(
        not (PACKAGE / "agent" / "heartbeat.py").exists(),
        reason="needs the in-rank agent that writes state.json (mldebug/agent/heartbeat.py)",
    ),
]

JOB = textwrap.dedent(
    """\
    import os
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    tensor = torch.ones(4)
    for _ in range(3):
        dist.all_reduce(tensor)


    def load_batch():
        total = 0
        # one line: Python 3.12+ gives the loop's jump back the `while` line, and a sample
        # may land on either
        while True: total += sum(range(100))  # ELSEWHERE_LINE


    print(f"READY {rank}", flush=True)
    if rank == 2:
        load_batch()
    work = dist.all_reduce(tensor, async_op=True)  # ASYNC_LINE
    while not work.is_completed():  # SPIN_LINE
        pass
    """
)


def line_of(marker: str) -> int:
    return marked_line(JOB, marker)


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    # --hang-timeout 4: the run's threshold for a hang (dump's too), reached in 4 s of the
    # ranks' spinning instead of the default 10 (the CPU is the other tests')
    folder = tmp_path_factory.mktemp("async_wait")
    with running_job(folder, JOB, 3, options=("--hang-timeout", "4")) as started:
        yield started


def test_the_rank_that_never_made_the_async_call_is_named_with_its_line(job):
    script, run_dir = job
    # Once the others have waited a couple of heartbeats, the verdict is an error.
    code, report = dump_json_until(
        run_dir, lambda report: any(f["severity"] == "error" for f in report["findings"][:1])
    )
    first = report["findings"][0] if report["findings"] else {}
    assert code == 1, report["findings"]
    assert first["kind"] == "outlier" and first["ranks"] == [2], first
    assert first["location"] == f"{script}:{line_of('ELSEWHERE_LINE')}"
    assert re.search(
        rf"^rank 2 never called all_reduce #\d+ \({re.escape(str(script))}:"
        rf"{line_of('ASYNC_LINE')}\)",
        first["summary"],
    ), first["summary"]
    assert f"it is at {script}:{line_of('ELSEWHERE_LINE')} in load_batch" in first["summary"]
    assert "while ranks 0-1 wait for it" in first["summary"]
    assert first["waiting"] == [0, 1] and "agent" in first["sources"]
    assert "progressing" not in [f["kind"] for f in report["findings"]]
    ranks = {r["rank"]: r for r in report["ranks"]}
    # The spinning ranks wait, whatever their stacks show (they are at the spin line).
    assert [ranks[r]["state"] for r in (0, 1)] == ["waiting", "waiting"]
    spin = line_of("SPIN_LINE")
    assert ranks[0]["location"] in (f"{script}:{spin}", f"{script}:{spin + 1}")
    assert ranks[2]["state"] == "running"
    for rank in ranks.values():
        assert rank["heartbeat_age"] is not None and rank["heartbeat_age"] < 10
        groups = rank["collectives"]["groups"]
        assert list(groups) == ["default_pg"]
    made = ranks[0]["collectives"]["groups"]["default_pg"]["enqueued"]
    behind = ranks[2]["collectives"]["groups"]["default_pg"]["enqueued"]
    assert made["op"] == "all_reduce" and behind["seq"] == made["seq"] - 1
