"""A real `ranks:` subgroup: 3 gloo ranks under `mldebug run --hang-timeout 4`; ranks 0 and 1
make a group with `new_group(..., use_local_synchronization=True)` (torch then names it by a
hash, so the agent names it by its ranks: `ranks:0-1`). Rank 0 all-reduces on it; rank 1, a
member, never calls on it and loops elsewhere; rank 2 is no member. Rank 1's agent has never
heard of the group, so only the name says it is a member: `dump` must name rank 1 behind.

The job starts once per module (importing torch in 3 ranks takes a while).
"""

from __future__ import annotations

import textwrap

import pytest
from testkit.jobs import dump_json_until, running_job
from testkit.jobs import line_of as marked_line

pytestmark = [pytest.mark.multirank, pytest.mark.timeout(600)]

JOB = textwrap.dedent(
    """\
    import time
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    tensor = torch.ones(4)
    dist.all_reduce(tensor)
    pair = dist.new_group([0, 1], use_local_synchronization=True) if rank < 2 else None


    def load_batch():
        total = 0
        while True: total += sum(range(100))  # ELSEWHERE_LINE (one line: a sample sees no other)


    def serve():
        while True:
            time.sleep(0.05)


    print(f"READY {rank}", flush=True)
    if rank == 0:
        work = dist.all_reduce(tensor, group=pair, async_op=True)  # PAIR_LINE
        while not work.is_completed():
            pass
    elif rank == 1:
        load_batch()
    else:
        serve()
    """
)


def line_of(marker: str) -> int:
    return marked_line(JOB, marker)


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    # --hang-timeout 4: the run's threshold for a hang (dump's too), reached in 4 s of the
    # two ranks' spinning instead of the default 10 (the CPU is the other tests')
    folder = tmp_path_factory.mktemp("subgroup")
    with running_job(folder, JOB, 3, options=("--hang-timeout", "4")) as started:
        yield started


def test_a_member_of_a_ranks_subgroup_that_never_called_on_it_is_named_behind(job):
    script, run_dir = job

    def behind_of(report: dict) -> list[dict]:
        return [f for f in report["findings"] if f["kind"] == "outlier" and f["ranks"] == [1]]

    _, report = dump_json_until(
        run_dir, lambda report: any(f["severity"] == "error" for f in behind_of(report)[:1]), 90
    )
    behind = behind_of(report)
    assert behind, report["findings"]
    (finding,) = behind
    assert finding["summary"].startswith(
        f"rank 1 never called all_reduce #1 on group ranks:0-1 ({script}:{line_of('PAIR_LINE')})"
        ": it has made no call on it yet; it is at "
        f"{script}:{line_of('ELSEWHERE_LINE')} in load_batch, while rank 0 waits for it"
    ), finding["summary"]
    ranks = {r["rank"]: r for r in report["ranks"]}
    assert "ranks:0-1" in ranks[0]["collectives"]["groups"]
    assert "ranks:0-1" not in ranks[1]["collectives"]["groups"]
    # rank 2 is no member of the pair: nothing is said of it
    assert not any(2 in f["ranks"] for f in report["findings"] if f["kind"] == "outlier")
