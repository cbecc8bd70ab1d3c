"""The in-rank agent in real 2-rank gloo jobs started with `mldebug run`.

All jobs start together in one module-scoped fixture (importing torch in every rank is
the slow part); each test then reads what its job's agents wrote while it runs or after.
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

from mldebug.collect.agentstate import read_state
from mldebug.files.rundir import RunPaths, hostname

pytestmark = [pytest.mark.multirank, pytest.mark.timeout(600)]

HOST = hostname()
PREAMBLE = """
import os, sys, time
import torch
import torch.distributed as dist
from torch.distributed import all_reduce  # taken before any call: must be the traced one
import mldebug

HERE = sys.argv[1]


def mark(name):
    open(os.path.join(HERE, name), "w").close()


def wait_for(name, busy=False):
    path = os.path.join(HERE, name)
    while not os.path.exists(path):
        if not busy:
            time.sleep(0.02)


dist.init_process_group("gloo")
rank = dist.get_rank()
"""

JOBS = {
    # Steps from an optimizer, then from mldebug.step(); calls on the world and a subgroup.
    "progress": """
        sub = dist.new_group([0, 1])
        model = torch.nn.Linear(4, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for i in range(8):
            model(torch.ones(3, 4)).sum().backward()
            opt.step()
            opt.zero_grad()
            t = torch.ones(4) * (rank + 1)
            all_reduce(t)  # LINE:reduce
            dist.broadcast(t, src=0, group=sub)
            dist.all_gather([torch.zeros(2), torch.zeros(2)], torch.ones(2))
            dist.barrier(group=sub)
            time.sleep(0.3)
        print("sum", t.tolist())
        mldebug.step(100)
        mldebug.step()
        opt.step()  # the program's count wins from now on
        mark(f"stepped.{rank}")
        wait_for("finish")
    """,
    # Rank 0 enqueues an async all_reduce and busy-waits without wait(); rank 1 is late.
    "async": """
        all_reduce(torch.ones(1))
        if rank == 0:
            wait_for("begin")  # asleep until its test comes: the busy wait lasts that test only
            work = all_reduce(torch.ones(8), async_op=True)  # LINE:async
            mark("enqueued")
            wait_for("finish", busy=True)
            work.wait()
        else:
            wait_for("go")
            all_reduce(torch.ones(8))
            wait_for("finish")
    """,
    # Rank 1 never reaches the fourth all_reduce: the job hangs.
    "hang": """
        t = torch.ones(4)
        for i in range(3):
            all_reduce(t)
        if rank == 0:
            all_reduce(t)  # LINE:hang
        else:
            mark("stuck")
            while True:
                time.sleep(1)  # LINE:sleep
    """,
    # Parts of the agent fail on purpose (MLDEBUG_AGENT_FAULT): nothing else changes.
    "fault": """
        model = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        model(torch.ones(1, 2)).sum().backward()
        opt.step()
        t = torch.ones(2) * (rank + 1)
        all_reduce(t)
        print("result", rank, t.tolist())
        sys.exit(3)
    """,
}
ENV = {"fault": {"MLDEBUG_AGENT_FAULT": "collectives,steps"}}


class Job:
    def __init__(self, name: str, root: Path):
        self.name = name
        self.dir = root / name
        self.dir.mkdir()
        self.script = self.dir / f"{name}.py"
        self.script.write_text(PREAMBLE + textwrap.dedent(JOBS[name]))
        self.paths = RunPaths(self.dir / "run")
        env = {
            **os.environ,
            "MLDEBUG_RUNS_DIR": str(root / "runs"),
            "MLDEBUG_HEARTBEAT": "0.2",
            **ENV.get(name, {}),
        }
        self.out = open(self.dir / "out.txt", "wb")
        self.err = open(self.dir / "err.txt", "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mldebug", "run", "--run-dir", str(self.paths.root)]
            + ["--nproc-per-node", "2", str(self.script), str(self.dir)],
            stdout=self.out,
            stderr=self.err,
            env=env,
            start_new_session=True,
        )

    def line(self, marker: str) -> str:
        lines = self.script.read_text().splitlines()
        number = next(i for i, text in enumerate(lines, 1) if f"# LINE:{marker}" in text)
        return f"{self.script}:{number}"

    def state(self, rank: int):
        return read_state(self.paths.root, rank)

    def group(self, rank: int, name: str = "default_pg"):
        state = self.state(rank)
        for group in state.groups if state else ():
            if group.group == name:
                return group
        return None

    def touch(self, name: str) -> None:
        (self.dir / name).touch()

    def wait(self, predicate, what: str, timeout: float = 180):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = predicate()
            if value:
                return value
            if self.proc.poll() is not None and not predicate():
                break
            time.sleep(0.05)
        pytest.fail(f"{self.name}: {what}; stderr: {(self.dir / 'err.txt').read_text()[-3000:]}")

    def finish(self, timeout: float = 120) -> int:
        return self.proc.wait(timeout)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        for rank in (0, 1):
            try:
                pid = json.loads(self.paths.proc_info(rank).read_text())["pid"]
                os.kill(pid, signal.SIGKILL)
            except (OSError, ValueError, KeyError):
                pass
        self.out.close()
        self.err.close()


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    root = tmp_path_factory.mktemp("agent_jobs")
    started = {}
    try:
        for name in JOBS:
            started[name] = Job(name, root)
        yield started
    finally:
        for job in started.values():
            job.stop()


def trace_of(state):
    return [(c.group, c.seq, c.op) for c in state.trace]


def test_state_moves_with_time_and_steps_and_round_trips(jobs):
    job = jobs["progress"]
    seen = set()

    def progressed():
        state = job.state(0)
        if state is not None:
            seen.add((state.time, state.step))
        return len({step for _, step in seen if step}) >= 3

    job.wait(progressed, "state.json did not show the step moving")
    assert len({when for when, _ in seen}) >= 3  # the heartbeat moves
    state = job.state(0)
    pid = json.loads(job.paths.proc_info(0).read_text())["pid"]
    assert state.pid == pid and state.interval == 0.2 and state.started <= state.time
    assert state.memory.rss > 10 << 20 and state.memory.cuda_allocated is None
    assert state.memory_history and state.memory_history[-1][0] in (state.step, state.step - 1)

    job.wait(lambda: (job.dir / "stepped.0").exists(), "mldebug.step() never ran")
    job.wait(lambda: (job.state(0) or state).step == 101, "mldebug.step() did not show")
    job.touch("finish")
    assert job.finish() == 0
    assert f"[{HOST}:0] sum [3.0, 3.0, 3.0, 3.0]" in (job.dir / "out.txt").read_text()
    assert job.state(0).step == 101 and job.state(1).step == 101  # the last write, at exit


def test_sequence_numbers_match_across_ranks_per_group(jobs):
    job = jobs["progress"]
    job.wait(lambda: job.proc.poll() is not None, "the job did not end")
    first, second = job.state(0), job.state(1)
    assert trace_of(first) == trace_of(second) and len(first.trace) == 32
    world, sub = job.group(0), job.group(0, "1")  # torch counted the subgroup out as "1"
    assert (world.enqueued.seq, world.completed.seq) == (16, 16)
    assert (sub.enqueued.seq, sub.completed.seq) == (16, 16) and sub.size == 2
    assert {(g.group, g.enqueued.seq) for g in first.groups} == {
        (g.group, g.enqueued.seq) for g in second.groups
    }
    reduces = [c for c in first.trace if c.op == "all_reduce"]
    assert reduces and all(c.site == job.line("reduce") for c in reduces)
    assert reduces[0].shapes == ((4,),) and reduces[0].dtypes == ("float32",)
    assert {c.op for c in first.trace} == {"all_reduce", "broadcast", "all_gather", "barrier"}
    assert all(not c.asynchronous and c.completed >= c.enqueued for c in first.trace)


def test_an_async_call_is_enqueued_but_not_completed_until_its_peer_comes(jobs):
    job = jobs["async"]
    job.touch("begin")
    job.wait(lambda: (job.dir / "enqueued").exists(), "rank 0 never enqueued")
    time.sleep(1.0)  # five heartbeats while rank 1 stays away
    group = job.wait(lambda: job.group(0), "no state for rank 0")
    assert (group.enqueued.seq, group.enqueued.op, group.completed.seq) == (2, "all_reduce", 1)
    assert group.enqueued.asynchronous and group.enqueued.site == job.line("async")
    assert job.state(0).trace[-1].completed is None
    assert job.group(1).enqueued.seq == 1
    job.touch("go")
    done = job.wait(
        lambda: (g := job.group(0)) and g.completed.seq == 2 and g,
        "rank 0 never saw its async all_reduce complete",
        timeout=60,
    )
    assert not (job.dir / "finish").exists()  # still busy-waiting, never called wait()
    assert done.completed.completed >= done.enqueued.enqueued
    job.touch("finish")
    assert job.finish() == 0


def test_a_rank_that_never_comes_leaves_the_others_waiting_at_its_call(jobs):
    job = jobs["hang"]

    def hung():
        waiting, stuck = job.group(0), job.group(1)
        return (
            waiting is not None
            and stuck is not None
            and waiting.enqueued.seq == 4
            and (job.dir / "stuck").exists()
        )

    job.wait(hung, "the hang never showed in state.json")
    time.sleep(0.6)  # three more heartbeats: nothing moves
    waiting, stuck = job.group(0), job.group(1)
    assert (waiting.enqueued.seq, waiting.completed.seq) == (4, 3)
    assert waiting.enqueued.site == job.line("hang")
    assert (stuck.enqueued.seq, stuck.completed.seq) == (3, 3)
    assert time.time() - job.state(0).time < 5 and time.time() - job.state(1).time < 5
    assert job.proc.poll() is None
    job.stop()


def test_failing_parts_change_neither_output_nor_exit_code(jobs):
    job = jobs["fault"]
    assert job.finish() == 3
    out = sorted((job.dir / "out.txt").read_text().splitlines())
    assert out == [f"[{HOST}:0] result 0 [3.0, 3.0]", f"[{HOST}:1] result 1 [3.0, 3.0]"]
    for rank in (0, 1):
        errors = [
            line
            for line in job.paths.stderr(rank).read_text().splitlines()
            if "mldebug agent:" in line
        ]
        assert len(errors) == 2, errors
        assert errors[0].startswith("mldebug agent: ") and "InjectedFault" in errors[0]
        events = [json.loads(x) for x in job.paths.events_file(rank).read_text().splitlines()]
        assert sorted(e["part"] for e in events) == ["collectives", "steps"]
        assert {e["kind"] for e in events} == {"agent_error"}
        state = job.state(rank)
        assert state.groups == () and state.trace == () and state.step is None
