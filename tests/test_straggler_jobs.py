"""Slow jobs, for real: gloo ranks running examples/straggler.py, judged while they run.

GIVEN four jobs started together (one module-scoped fixture: importing torch in the ranks is
what takes the time, so they share it), each rank's compute a host wait (`--host-waits`: as
a GPU rank's thread waits for its kernels, so 9 ranks share 2 cores without each taking
one; the CPU-heavy neighbours below are the contention):
  * `mldebug run`, 3 ranks, rank 2 computes 1.4x as long as the others;
  * `mldebug run`, 2 ranks, rank 1's DataLoader is 4x slower;
  * `mldebug run`, 2 healthy ranks that spend half their step or more in collectives (a
    16 MiB all_reduce a step, as sharded FSDP / ZeRO-3 jobs do): ±10% jitter, a 1 s
    checkpoint pause on rank 0 every 25 steps, GC on (the 3-minute version is
    benchmarks/bench_straggler.py's);
  * plain torchrun (`python -m torch.distributed.run`), 2 ranks, rank 1 computes 1.5x;
THEN `mldebug run` names the straggler on its console within 30 s (and in events.jsonl),
`dump` names it again and again, with since when, also with a CPU-heavy process beside the
job, and so does `dump --profile`,
`dump` names the input-bound rank with its DataLoader, the healthy job gets no warning over a dump every few seconds (its
communication share is info), for 3 minutes of its life, also once CPU-heavy neighbours make
the node busier (a busier node is not a slower job: info at most), and `dump --profile`
names the plain job's straggler without any agent (last, once the other jobs are stopped).
A DDP job's straggler, named from torch's Flight Recorder: tests/test_compat_ddp.py.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
from testkit.jobs import MLDEBUG, dump_json, start, stop, wait_ready
from testkit.procs import bursty_neighbours

from mldebug.analysis.change import changes
from mldebug.cli import main
from mldebug.files.rundir import RunPaths
from mldebug.launch.stragglers import read_views

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "straggler.py"
# The jobs run from a temporary folder: this checkout's mldebug on their path.
PATH_ENV = {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
TIMING_KINDS = {"straggler", "input_bound", "comm_bound", "host_sync"}
HEALTHY_FOR = 180.0  # seconds of the healthy job's life judged by a dump every few seconds
BUSIER_FROM = 160.0  # ...with CPU-heavy neighbours, 2 a core, from this second on
QUIET, BUSY = 25.0, 20.0  # seconds at least of the job alone, then beside them
pytestmark = [pytest.mark.long, pytest.mark.multirank, pytest.mark.timeout(900)]


def console(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("slowjobs")
    started = {}
    logs = {}
    for name, nproc, args in (
        ("slow", 3, ("--slow-rank", "2", "--factor", "1.4", "--steps", "0")),
        # rank 0 waits for data 12 ms of its step (under DATA_SHARE: not input-bound itself,
        # however a loaded machine stretches its sleeps), rank 1 48 ms
        ("data", 2, ("--slow-rank", "1", "--factor", "1", "--data-factor", "4", "--data-ms", "1.5",
                     "--compute-ms", "30", "--steps", "0")),
        ("healthy", 2, ("--factor", "1", "--jitter", "0.1", "--checkpoint-every", "25",
                        "--compute-ms", "10", "--data-ms", "0.5", "--comm-kb", "16384",
                        "--steps", "0")),
    ):  # fmt: skip
        logs[name] = folder / f"{name}.console"
        with logs[name].open("wb") as err:
            started[name] = start(
                folder,
                EXAMPLE,
                nproc,
                name=name,
                args=(*args, "--host-waits"),
                stderr=err,
                env={"NO_COLOR": "1", **PATH_ENV},
            )
    plain_out = (folder / "plain.out").open("wb")
    plain = subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", str(EXAMPLE),
         "--slow-rank", "1", "--factor", "1.5", "--steps", "0", "--host-waits"],
        stdout=plain_out, stderr=subprocess.STDOUT, start_new_session=True, cwd=folder,
        env={k: v for k, v in os.environ.items() if not k.startswith("MLDEBUG_")},
    )  # fmt: skip
    try:
        for name, (proc, run_dir) in started.items():
            wait_ready(proc, run_dir, 3 if name == "slow" else 2, marker="READY")
        # The plain job is the last test's: once its ranks are past their first step it is
        # stopped (SIGSTOP: no CPU) until then. Each other job is ended after its last test.
        deadline = time.monotonic() + 240
        while console(folder / "plain.out").count("READY") < 2 and time.monotonic() < deadline:
            assert plain.poll() is None, console(folder / "plain.out")
            time.sleep(0.5)
        os.killpg(plain.pid, signal.SIGSTOP)
        yield {
            name: (run_dir, logs[name], time.monotonic()) for name, (_, run_dir) in started.items()
        } | {
            "plain": (plain, folder / "plain.out"),
            "runs": [p for p, _ in started.values()],
            "proc": {name: p for name, (p, _) in started.items()},
            "others": [p for name, (p, _) in started.items() if name != "healthy"],
        }
    finally:
        if plain.poll() is None:
            os.killpg(plain.pid, signal.SIGCONT)  # a stopped process ends only once woken
        stop(*(proc for proc, _ in started.values()), plain)
        plain_out.close()


def test_mldebug_run_names_the_straggler_within_30_seconds(jobs):
    run_dir, log, ready = jobs["slow"]
    # WHEN the job has run a while THEN its console says who the straggler is, once.
    deadline = ready + 30
    while time.monotonic() < deadline and "is the straggler" not in console(log):
        time.sleep(0.5)
    lines = [line for line in console(log).splitlines() if "is the straggler" in line]
    assert lines, console(log)[-2000:]
    assert lines[0].startswith("mldebug: rank 2 is the straggler: it arrives last at ")
    assert "MLDEBUG_STRAGGLER=0 silences this line" in lines[0]
    assert "examples/straggler.py:" in lines[0]  # its hottest user line
    events = [
        json.loads(x)
        for x in (run_dir / "ranks" / "2" / "events.jsonl").read_text().split("\n")
        if x
    ]
    assert any(e["kind"] == "straggler" and e["rank"] == 2 for e in events)
    # ...and `dump` says it too, with the timing table.
    _, report = dump_json(run_dir)
    found = [(f["kind"], f["ranks"]) for f in report["findings"] if f["kind"] in TIMING_KINDS]
    assert found == [("straggler", [2])]
    rows = {row["rank"]: row for row in report["timing"]["ranks"]}
    assert rows[2]["straggler"] and rows[2]["arrival"] == 1
    assert rows[2]["waiting"] < min(rows[0]["waiting"], rows[1]["waiting"])


def test_a_rank_with_a_slow_dataloader_is_named_with_it(jobs):
    run_dir, log, _ = jobs["data"]
    deadline = time.monotonic() + 60
    found = []
    while time.monotonic() < deadline:
        _, report = dump_json(run_dir)
        found = [f for f in report["findings"] if f["kind"] in TIMING_KINDS]
        if found:
            break
        time.sleep(2)
    assert [(f["kind"], f["ranks"]) for f in found] == [("input_bound", [1])]
    assert "DataLoader(SlowDataset, num_workers=0) at " in found[0]["summary"]
    assert found[0]["recipe"] == "input-bound"
    stop(jobs["proc"]["data"])  # done with: its CPU goes to the other jobs


def dump_here(capsys, run_dir: Path, *options: str) -> dict:
    """`mldebug dump --run DIR --json [options]` called in this process (its exit codes are
    tested elsewhere): no interpreter to start and no imports to pay on a loaded machine."""
    capsys.readouterr()
    assert main(["dump", "--run", str(run_dir), "--json", *options]) in (0, 1)
    return json.loads(capsys.readouterr().out)


@contextmanager
def cpu_heavy_neighbour():
    """Another user's work on the node: a process that keeps one core busy."""
    spin = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield
    finally:
        spin.kill()
        spin.wait()


def ranks_changes(run_dir: Path) -> list[str]:
    """What the change-over-time analysis saw of each rank: said where a test fails, to
    tell a rank that waits from the rank it waits for."""
    views = read_views(RunPaths(run_dir))
    found, _, _, peers = changes(views)
    return [repr(c) for c in found] + [f"run-queue delay growth {peers}"] + [
        f"rank {v.rank} {v.state}: {len(v.agent.timing.history)} blocks"
        if v.agent and v.agent.timing else f"rank {v.rank} {v.state}: no timing"
        for v in views
    ]  # fmt: skip


def test_the_straggler_stays_named_at_every_dump_on_a_busy_node(jobs, capsys):
    run_dir, _, ready = jobs["slow"]
    # WHEN a CPU-heavy process runs beside the job and the user runs `dump` again and again
    # THEN every dump names rank 2, and says since when (the run's evidence, not only the
    # last 64 steps': analysis/timing_hold.py).
    while time.monotonic() < ready + 25:  # past the console test: named once already
        time.sleep(1)
    with cpu_heavy_neighbour():
        time.sleep(5)  # the job's latest steps are taken beside it
        for _ in range(3):
            report = dump_here(capsys, run_dir)
            found = [f for f in report["findings"] if f["kind"] in TIMING_KINDS]
            assert [(f["kind"], f["ranks"]) for f in found] == [("straggler", [2])]
            assert int(found[0]["facts"]["since_step"]) >= 1
            assert f"(since step {found[0]['facts']['since_step']}, " in found[0]["summary"]
        # ...and `dump --profile` (the sampled stacks, with the agents' evidence) too.
        report = dump_here(capsys, run_dir, "--profile", "3")
        found = [f for f in report["findings"] if f["kind"] in TIMING_KINDS]
        assert [(f["kind"], f["ranks"]) for f in found] == [("straggler", [2])]
    stop(jobs["proc"]["slow"])


def test_a_healthy_communication_heavy_job_gets_no_warning(jobs, capsys):
    run_dir, log, ready = jobs["healthy"]
    # A dump every few seconds for 40 s from its first step: long enough for two checkpoint
    # pauses, for the run's blocks to be judged (4 blocks of 8 steps after the first 16) and for the
    # collective share's growth check (24 blocks, ~200 steps of ~60 ms); not the 3 minutes
    # of benchmarks/bench_straggler.py, which repeats it over several runs.
    seen: list[str] = []
    dumps = 0
    while time.monotonic() < ready + 40 or dumps < 4:
        dumps += 1
        report = dump_here(capsys, run_dir)
        warned = [f for f in report["findings"] if f["severity"] in ("warning", "error")]
        assert warned == [], warned
        seen += [f["kind"] for f in report["findings"] if f["kind"] in TIMING_KINDS]
        assert report["timing"]["ranks"], report["timing"]
        time.sleep(2)
    # Half its step in collectives is said, as info (the job is as it should be).
    assert set(seen) <= {"comm_bound"} and "comm_bound" in seen, seen
    said = [line for line in console(log).splitlines() if "silences this line" in line]
    assert said == []


def test_a_healthy_job_stays_silent_for_3_minutes_as_the_node_gets_busier(jobs, capsys):
    run_dir, log, ready = jobs["healthy"]
    # GIVEN the healthy communication-heavy job alone (the other `mldebug run` jobs are done
    # with; the plain job, for the last test, is stopped meanwhile) WHEN the user runs `dump`
    # every few seconds until the job is 3 minutes old, and from BUSIER_FROM on CPU-heavy
    # neighbours keep every core busy (the node gets busier: the job gets slower, not by
    # its own doing) THEN no dump warns (a `slowdown` may be said, at info: a busier node).
    stop(*jobs["others"])
    quiet_at = time.time()
    # The neighbours come after QUIET s of the job alone (to tell apart), and stay BUSY s.
    busier = max(ready + BUSIER_FROM, time.monotonic() + QUIET)
    end = max(ready + HEALTHY_FOR, busier + BUSY)
    busier_at = None
    dumps = 0
    seen = set()
    with ExitStack() as neighbours:
        while time.monotonic() < end:
            if busier_at is None and time.monotonic() >= busier:
                cores = len(os.sched_getaffinity(0))
                neighbours.enter_context(bursty_neighbours(2 * cores))
                busier_at = time.time()
            dumps += 1
            report = dump_here(capsys, run_dir)
            warned = [f for f in report["findings"] if f["severity"] in ("warning", "error")]
            assert warned == [], "\n".join([json.dumps(warned), *ranks_changes(run_dir)])
            seen |= {f["kind"] for f in report["findings"] if f["kind"] in TIMING_KINDS}
            seen |= {f"slowdown: {f['facts'].get('cause')}" for f in report["findings"]
                     if f["kind"] == "slowdown"}  # fmt: skip
            time.sleep(3)
    assert dumps >= 10 and busier_at is not None
    print(f"findings seen: {sorted(seen)}")  # with -s: did the node's slowdown reach 1.3x
    assert {k for k in seen if not k.startswith("slowdown")} <= {"comm_bound"}, seen
    said = [line for line in console(log).splitlines() if "silences this line" in line]
    assert said == []
    # ...and the node really was busy beside the neighbours: each step's run-queue delay
    # (the count the change-over-time finding subtracts, agent/runqueue.py) grew from the
    # job alone, or was already a fifth of the step (other tests' jobs beside it).
    for view in read_views(RunPaths(run_dir)):
        blocks = [b for b in view.agent.timing.history if b.delay is not None]
        before = [b.delay for b in blocks if quiet_at + 5 < b.start and b.end < busier_at]
        after = [b for b in blocks if b.start > busier_at + 5]
        assert before and after, view.agent.timing.history
        held = statistics.median([b.delay for b in after])
        step = statistics.median([b.wall for b in after])
        assert held > statistics.median(before) or held >= 0.2 * step, (before, after)


def test_dump_profile_names_the_straggler_of_a_plain_torchrun_job(jobs):
    plain, out = jobs["plain"]
    # The last test of the module: the `mldebug run` jobs are done with. Sampling judges
    # the plain job without 10 other ranks on its 2 cores; the suite's other workers still
    # load them, so it samples 8 s, as the report's "sample longer to be sure" asks.
    stop(*jobs["runs"])
    os.killpg(plain.pid, signal.SIGCONT)  # stopped since its first step (the fixture)
    done = subprocess.run(
        [*MLDEBUG, "dump", "--pid", str(plain.pid), "--profile", "8", "--json"],
        capture_output=True, text=True, timeout=120, env={**os.environ, **PATH_ENV},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    found = [f for f in report["findings"] if f["kind"] in TIMING_KINDS]
    assert [(f["kind"], f["ranks"]) for f in found] == [("straggler", [1])]
    assert "standard errors" in found[0]["summary"]
    assert report["timing"]["source"] == "sampling"
    assert {row["rank"] for row in report["timing"]["ranks"]} == {0, 1}
