"""Memory findings on a real job: 2 gloo ranks under `mldebug run`. Rank 1 keeps each step's
error with its autograd graph (and so the step's activations), as a logging bug does; rank 0
keeps numbers. Then both wait, alive, for `mldebug dump`: rank 1 must be flagged for growing
memory, with its rate per step, and rank 0 must not be.
"""

from __future__ import annotations

import sys
import textwrap

import pytest
from testkit.jobs import dump_json, start, stop, wait_ready

pytestmark = [pytest.mark.multirank, pytest.mark.timeout(600)]
MLDEBUG = [sys.executable, "-m", "mldebug"]
MiB = 1 << 20

JOB = textwrap.dedent(
    """\
    import time

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(rank)
    model = torch.nn.Linear(512, 512)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
    kept = []
    for step in range(34):
        data, target = torch.randn(2048, 512), torch.randn(2048, 512)
        out = model(data)
        loss = (out - target).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        error = (out - target).abs().mean()
        kept.append(error if rank == 1 else error.item())  # rank 1 keeps the graphs
        total = loss.detach().clone()
        dist.all_reduce(total)
        time.sleep(0.12)
    print("READY", flush=True)
    time.sleep(600)
    """
)


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("memory")
    script = tmp_path / "job.py"
    script.write_text(JOB)
    # Every 4 MiB tensor in its own mapping, given back when freed: the healthy rank's RSS
    # is then flat, not glibc's heap growing and trimming by 4 MiB at random (which, on a
    # loaded machine, once grew at 8 steps in a row: a healthy rank that looked like a leak).
    # The leaking rank still keeps a mapping per step.
    env = {"NO_COLOR": "1", "MALLOC_MMAP_THRESHOLD_": str(128 << 10)}
    proc, run_dir = start(tmp_path, script, 2, env=env)
    try:
        wait_ready(proc, run_dir, 2)
        yield script, run_dir
    finally:
        stop(proc)


def test_dump_flags_the_rank_that_keeps_its_graphs_and_not_the_healthy_one(job):
    script, run_dir = job
    findings = dump_json(run_dir)[1]["findings"]
    (grows,) = [f for f in findings if f["kind"] == "memory_growth"]
    assert grows["ranks"] == [1] and grows["severity"] == "warning", findings
    assert grows["recipe"] == "memory-growth"
    assert grows["summary"].startswith("rank 1: memory (RSS) grew at "), grows["summary"]
    rate = float(grows["summary"].split(" MiB per step")[0].rsplit(" ", 1)[1])
    assert 2 <= rate <= 30, grows["summary"]  # about 8 MiB kept a step, RSS is noisy
    assert all(0 not in f["ranks"] for f in findings if f["kind"].startswith("memory"))
