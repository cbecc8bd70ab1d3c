"""NaN/Inf origin on a real job: 2 gloo ranks under `mldebug run --detect-anomaly`. On rank 1
only, at step 3, a Linear's weights are set so that its output overflows float32; the ranks
then wait (alive) for `mldebug dump`. Rank 1, step 3, `blocks.1.gate` and the line that
called it must be named on its console, in its events.jsonl and as dump's first finding
(text and --json); rank 0, whose numbers stayed finite, is not named.

The same script runs a second time, at once, with the detector failing inside on purpose
(MLDEBUG_AGENT_FAULT=anomaly) and ending by itself: it must say so once per rank and
change nothing of the program: the same losses as the first run, exit code 0.
"""

from __future__ import annotations

import json
import sys
import textwrap

import pytest
from testkit.jobs import dump, start, stop, wait_ready

pytestmark = [pytest.mark.multirank, pytest.mark.compat, pytest.mark.timeout(600)]
MLDEBUG = [sys.executable, "-m", "mldebug"]
BAD_RANK, BAD_STEP = 1, 3

JOB = textwrap.dedent(
    f"""\
    import sys
    import time

    import torch
    import torch.distributed as dist
    from torch import nn


    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.gate = nn.Linear(16, 16)
            self.act = nn.Tanh()

        def forward(self, x):
            return self.act(self.gate(x))  # GATE_LINE


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.Sequential(Block(), Block(), Block())
            self.head = nn.Linear(16, 1)

        def forward(self, x):
            return self.head(self.blocks(x))


    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(6):
        if rank == {BAD_RANK} and step == {BAD_STEP}:
            with torch.no_grad():
                model.blocks[1].gate.weight.fill_(1e38)  # finite, but x @ w.T is not
        loss = model(torch.randn(8, 16)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total = loss.detach().clone()
        dist.all_reduce(total)
        print(f"step {{step}} loss {{loss.item()!r}} total {{total.item()!r}}", flush=True)
    if sys.argv[1:] == ["wait"]:
        print("READY", flush=True)
        time.sleep(600)
    """
)


def line_of(marker: str) -> int:
    return next(i for i, line in enumerate(JOB.splitlines(), 1) if marker in line)


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """Both runs, started together: the one that waits, and the faulted one that ends."""
    tmp_path = tmp_path_factory.mktemp("nonfinite")
    script = tmp_path / "job.py"
    script.write_text(JOB)
    started = []
    for name, extra_env, args in (
        ("run", {}, ("wait",)),
        ("faulted", {"MLDEBUG_AGENT_FAULT": "anomaly"}, ()),
    ):
        started.append(
            start(
                tmp_path,
                script,
                2,
                name=name,
                options=("--detect-anomaly",),
                args=args,
                env={"NO_COLOR": "1", **extra_env},
                stderr=open(tmp_path / f"{name}.err", "wb"),  # noqa: SIM115 (the job's lifetime)
            )
        )
    (waiting, run_dir), (faulted, _) = started
    try:
        wait_ready(waiting, run_dir, 2)
        faulted.wait(timeout=240)
        yield script, run_dir, tmp_path / "run.err", faulted.returncode
    finally:
        stop(waiting, faulted)


def test_the_rank_says_which_module_at_which_step_and_line(job):
    script, run_dir, console, _ = job
    where = f"{script}:{line_of('GATE_LINE')}"
    err = console.read_text()
    assert (
        f"mldebug: rank 1 step 3: blocks.1.gate (Linear) output became inf, called at {where}"
        in err
    ), err
    assert "mldebug: rank 0" not in err
    lines = (run_dir / "ranks" / "1" / "events.jsonl").read_text().splitlines()
    (event,) = [json.loads(line) for line in lines if '"nonfinite"' in line]
    assert (event["rank"], event["step"], event["module"], event["module_type"]) == (
        1,
        3,
        "blocks.1.gate",
        "Linear",
    )
    assert event["what"] == "output" and event["value"] == "inf" and event["location"] == where
    # The trail: what came before, in call order (a Block hands on its act's output: once).
    assert [name for name, _ in event["trail"]][-3:] == [
        "Net (input)",
        "blocks.0.gate",
        "blocks.0.act",
    ]
    rank0 = run_dir / "ranks" / "0" / "events.jsonl"
    assert not rank0.exists() or '"nonfinite"' not in rank0.read_text()


def test_dump_names_the_origin_first_in_json_and_text(job):
    script, run_dir, _, _ = job
    where = f"{script}:{line_of('GATE_LINE')}"
    report = json.loads(dump(run_dir, "--json").stdout)
    first = report["findings"][0]
    assert first["kind"] == "nonfinite" and first["severity"] == "error", report["findings"]
    assert first["ranks"] == [1] and first["location"] == where
    assert first["recipe"] == "nonfinite-origin"
    assert first["summary"] == (
        f"NaN/Inf from rank 1 at step 3: blocks.1.gate (Linear) output became inf, "
        f"called at {where}"
    )
    text = dump(run_dir).stdout
    assert "Verdict: NaN/Inf from rank 1 at step 3: blocks.1.gate (Linear) output became inf" in (
        " ".join(text.split())
    )
    assert "mldebug recipes nonfinite-origin" in text


def test_a_detector_that_fails_inside_says_so_once_and_changes_nothing(job):
    _, run_dir, _, code = job
    faulted = run_dir.parent / "faulted"
    assert code == 0
    err = (run_dir.parent / "faulted.err").read_text()
    for rank in (0, 1):
        # The same losses, to the last digit, as the run whose detector worked.
        ran = (run_dir / "ranks" / str(rank) / "stdout.log").read_text().replace("READY\n", "")
        assert (faulted / "ranks" / str(rank) / "stdout.log").read_text() == ran
        assert ran.count("\n") == 6 and "step 5 loss" in ran
        lines = (faulted / "ranks" / str(rank) / "events.jsonl").read_text().splitlines()
        kinds = [json.loads(line)["kind"] for line in lines]
        assert "nonfinite" not in kinds
        (error,) = [json.loads(line) for line in lines if '"agent_error"' in line]
        assert error["part"] == "anomaly" and "InjectedFault" in error["message"]
        assert err.count("] mldebug agent: anomaly: InjectedFault") == 2
    assert "became inf" not in err
