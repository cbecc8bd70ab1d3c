"""The hang watchdog of `mldebug run --hang-timeout`: what counts as progress, when it fires,
what it writes and says, and keep/stop.

The unit tests give the watchdog a run directory with ranks/<rank>/state.json files written
as docs/agent.md says the in-rank agent writes them, a clock the test moves, and a dump whose
collector is a double: stack samples assembled as py-spy reports them (frames of a job at
/job/t.py), judged by the real analysis (`build_snapshot`); the reports are rendered by the
real `dump` renderers. The last tests run real gloo jobs under `mldebug run`.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from testkit.jobs import dump_here, dump_json

from mldebug.analysis.snapshot import build_snapshot
from mldebug.files.rundir import RunPaths
from mldebug.files.safeio import make_private_dir, write_json_atomic
from mldebug.launch.watchdog import ON_HANG_KEEP, ON_HANG_STOP, HangWatchdog, progress_token
from mldebug.model import Frame, RankTarget, StackSample, ThreadStack
from mldebug.report.hang import hang_report
from mldebug.wording import finding_text

pytestmark = pytest.mark.long  # the module's three real jobs run about two minutes (below)

TORCH = "/usr/lib/python3/site-packages/torch/distributed/distributed_c10d.py"
MAIN = Frame("<module>", "/job/t.py", 40)
IN_ALL_REDUCE = (MAIN, Frame("train", "/job/t.py", 9), Frame("all_reduce", TORCH, 2500))
IN_SLEEP = (MAIN, Frame("wait_for_checkpoint", "/job/t.py", 30))
EVALUATING = (MAIN, Frame("evaluate", "/job/t.py", 12))


def stacks_snapshot(stacks: dict, busy: set[int] = frozenset(), now: float = 1000.0):
    """The real analysis of 3 readings a rank, 0.4 s apart: `stacks` rank -> frames; a rank
    in `busy` computes (its line moves, its main thread uses CPU), the others sit idle."""
    targets = [RankTarget(pid=100 + rank, rank=rank, world_size=len(stacks)) for rank in stacks]
    samples = {}
    for target in targets:
        frames = stacks[target.rank]
        moving = target.rank in busy
        samples[target.pid] = tuple(
            StackSample(
                target,
                now - 0.8 + 0.4 * i,
                threads=(
                    ThreadStack(
                        1,
                        "MainThread",
                        frames[:-1]
                        + (
                            Frame(
                                frames[-1].function,
                                frames[-1].file,
                                frames[-1].line + (i if moving else 0),
                            ),
                        ),
                    ),
                ),
                cpu_seconds=10.0 + (0.35 * i if moving else 0.0),
                main_cpu_seconds=9.0 + (0.35 * i if moving else 0.0),
            )
            for i in range(3)
        )
    return build_snapshot(targets, samples, len(stacks), now=now)


HUNG = stacks_snapshot({0: IN_ALL_REDUCE, 1: IN_SLEEP})
VERDICT = HUNG.findings[0].summary
WORKING = stacks_snapshot({0: EVALUATING, 1: EVALUATING}, busy={0, 1})


def write_state(paths: RunPaths, rank: int, step=None, made=0, done=0, beat=100.0) -> None:
    """ranks/<rank>/state.json per docs/agent.md (what the agent writes once a second)."""
    make_private_dir(paths.ranks_dir)
    make_private_dir(paths.rank_dir(rank))
    groups = {}
    if made:
        groups["default_pg"] = {
            "size": 2,
            "enqueued": {"seq": made, "op": "all_reduce", "time": beat, "site": "/job/t.py:9"},
            "completed": {"seq": done, "op": "all_reduce", "time": beat} if done else None,
        }
    write_json_atomic(
        paths.state_file(rank),
        {
            "version": 1,
            "rank": rank,
            "pid": 1000 + rank,
            "time": beat,
            "step": step,
            "groups": groups,
            "trace": [],
        },
    )


def write_log(paths: RunPaths, rank: int, text: str) -> None:
    make_private_dir(paths.ranks_dir)
    make_private_dir(paths.rank_dir(rank))
    with open(paths.stdout(rank), "a") as handle:
        handle.write(text)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Job:
    """What the watchdog is given: a run directory, a clock, and records of what it did."""

    def __init__(self, tmp_path, on_hang=ON_HANG_KEEP, dump=None, timeout=60.0):
        self.paths = RunPaths(make_private_dir(tmp_path / "run"))
        self.clock = Clock()
        self.said: list[str] = []
        self.stops = 0
        self.recorded: list[list[dict]] = []
        self.alive = True
        self.dumps = 0

        self.snapshot = HUNG  # what the next dump sees

        def fixed_dump(root):
            self.dumps += 1
            return self.snapshot, ()

        self.watchdog = HangWatchdog(
            self.paths,
            timeout,
            on_hang,
            render=hang_report,
            alive=lambda: self.alive,
            say=self.said.append,
            stop=self.stop,
            record=self.recorded.append,
            dump=dump or fixed_dump,
            clock=self.clock,
        )

    def stop(self) -> None:
        self.stops += 1

    def look(self, after: float):
        self.clock.now += after
        return self.watchdog.check()

    def reports(self) -> list[str]:
        folder = self.paths.reports_dir
        return sorted(os.listdir(folder)) if folder.exists() else []


# -- what counts as progress -----------------------------------------------------------------


def test_a_heartbeat_alone_is_no_progress_but_a_step_or_a_collective_is(tmp_path):
    paths = RunPaths(make_private_dir(tmp_path / "run"))
    write_state(paths, 0, step=3, made=7, done=6, beat=100.0)
    write_state(paths, 1, step=3, made=7, done=6, beat=100.0)
    before = progress_token(paths)
    write_state(paths, 1, step=3, made=7, done=6, beat=101.0)  # the next heartbeat, nothing else
    assert progress_token(paths) == before
    write_state(paths, 1, step=3, made=7, done=7, beat=102.0)  # call #7 completed
    after_collective = progress_token(paths)
    assert after_collective != before
    write_state(paths, 0, step=4, made=7, done=6, beat=103.0)  # a step
    assert progress_token(paths) != after_collective


def test_output_is_no_progress_once_the_agents_count_steps_or_collectives(tmp_path):
    # A logging thread that prints forever must not hide a training loop that hangs.
    paths = RunPaths(make_private_dir(tmp_path / "run"))
    write_state(paths, 0, step=1, made=2, done=2)
    before = progress_token(paths)
    write_log(paths, 0, "throughput 12.3 it/s\n")
    assert progress_token(paths) == before


def test_before_the_first_step_or_collective_and_without_an_agent_output_is_progress(tmp_path):
    paths = RunPaths(make_private_dir(tmp_path / "run"))
    write_log(paths, 0, "loading shard 1/100\n")
    without_agent = progress_token(paths)
    write_log(paths, 0, "loading shard 2/100\n")
    assert progress_token(paths) != without_agent
    write_state(paths, 0)  # an agent that has counted nothing yet (importing, loading data)
    starting = progress_token(paths)
    write_log(paths, 0, "loading shard 3/100\n")
    assert progress_token(paths) != starting


# -- when it fires, what it writes and says ---------------------------------------------------


def test_no_progress_for_the_timeout_writes_the_report_and_says_the_verdict(tmp_path):
    job = Job(tmp_path)
    write_state(job.paths, 0, step=5, made=9, done=8)
    write_state(job.paths, 1, step=5, made=8, done=8)
    assert job.look(0) is None
    assert job.look(59) is None and job.reports() == []
    report = job.look(2)
    assert report is not None and job.dumps == 1
    names = job.reports()
    assert len(names) == 2 and names[0].startswith("hang-")
    assert {n.rsplit(".", 1)[1] for n in names} == {"json", "txt"}
    text = report.text_path.read_text()
    assert "Verdict: rank 1 never reached all_reduce" in text  # dump's own text report
    data = json.loads(report.json_path.read_text())
    assert data["verdict"] == VERDICT and data["findings"][0]["ranks"] == [1]
    assert data["no_progress_for"] == 61.0 and data["watchdog"] == "hang"
    (message,) = job.said
    assert message.startswith(f"mldebug: no progress for 60s; verdict: {VERDICT}")
    assert f"report: {report.text_path}" in message
    assert "keeps running" in message and job.stops == 0
    assert job.recorded[-1][0]["report"] == str(report.text_path)  # run.json's "hangs"


def test_once_per_hang_and_again_after_progress_resumed(tmp_path):
    job = Job(tmp_path)
    write_state(job.paths, 0, step=5, made=9, done=8)
    job.look(0)
    assert job.look(61) is not None
    assert job.look(61) is None and job.look(600) is None  # the same hang: said once
    write_state(job.paths, 0, step=6, made=10, done=10)  # it moved on...
    assert job.look(1) is None
    assert job.look(59) is None
    assert job.look(2) is not None  # ...and hung again
    assert job.dumps == 2 and len(job.said) == 2 and len(job.reports()) == 4


def test_on_hang_stop_stops_the_job_after_the_report(tmp_path):
    job = Job(tmp_path, on_hang=ON_HANG_STOP)
    write_state(job.paths, 0, step=1, made=1)
    job.look(0)
    job.look(61)
    assert job.stops == 1
    assert "stopping the job (--on-hang stop)" in job.said[0]
    assert len(job.reports()) == 2


def test_nothing_is_reported_when_no_process_of_the_job_lives(tmp_path):
    job = Job(tmp_path)
    write_state(job.paths, 0, step=1, made=1)
    job.alive = False
    job.look(0)
    assert job.look(3600) is None and job.dumps == 0 and job.said == []


def test_a_dump_that_fails_still_leaves_a_report_and_a_line(tmp_path):
    def broken(root):
        raise RuntimeError("py-spy is not installed")

    job = Job(tmp_path, dump=broken)
    write_state(job.paths, 0, step=1, made=1)
    job.look(0)
    assert job.look(61) is None  # no dump is no hang verdict: nothing is stopped on it
    (report,) = job.watchdog.quiet_reports
    assert "py-spy is not installed" in report.text_path.read_text()
    assert json.loads(report.json_path.read_text())["verdict"] is None
    assert "no dump (py-spy is not installed)" in job.said[0]


def test_reports_of_two_hangs_in_one_second_do_not_overwrite_each_other(tmp_path):
    job = Job(tmp_path)
    first = job.watchdog.fire(61)
    second = job.watchdog.fire(61)
    assert first.text_path != second.text_path
    assert first.text_path.exists() and second.text_path.exists()


# -- the dump decides: working is no hang, a short wait is not one yet ------------------------


def agent_state(rank: int, made: int, done: int, waited: float, now: float = 1000.0) -> dict:
    """A state.json whose rank made call #made `waited` seconds before its heartbeat."""
    call = {"seq": made, "op": "barrier", "time": now - waited, "site": "/job/t.py:9"}
    return {
        "version": 1,
        "rank": rank,
        "pid": 100 + rank,
        "time": now,
        "step": 7,
        "groups": {
            "default_pg": {
                "size": 2,
                "enqueued": call,
                "completed": {**call, "seq": done} if done else None,
            }
        },
        "trace": [],
    }


def test_every_rank_computing_is_reported_as_no_hang_and_never_stopped(tmp_path):
    job = Job(tmp_path, on_hang=ON_HANG_STOP, timeout=10)
    job.snapshot = WORKING
    write_state(job.paths, 0, step=5, made=9, done=9)
    job.look(0)
    assert job.look(11) is None  # no hang report...
    assert job.stops == 0 and job.watchdog.reports == []
    (message,) = job.said
    assert message.startswith(
        "mldebug: no step or collective for 11s, but every rank is computing in "
        "evaluate (/job/t.py:"
    )
    assert message.split("\n")[0].endswith("): not a hang")
    (report,) = job.watchdog.quiet_reports  # ...but the look is kept, as info
    assert json.loads(report.json_path.read_text())["watchdog"] == "working"


def test_a_quiet_phase_that_recurs_at_the_same_place_is_learned(tmp_path):
    job = Job(tmp_path, on_hang=ON_HANG_STOP, timeout=10)
    job.snapshot = WORKING
    write_state(job.paths, 0, step=5, made=9, done=9)
    job.look(0)
    job.look(11)  # the first evaluation: said once
    write_state(job.paths, 0, step=30, made=40, done=40)  # training again...
    job.look(1)
    job.look(11)  # ...the next evaluation, at the same place: nothing said
    job.look(10)
    assert len(job.said) == 1 and job.stops == 0 and job.dumps == 3
    assert len(job.reports()) == 2  # one report: the first look
    job.snapshot = HUNG  # then a real hang in the same job
    write_state(job.paths, 0, step=31, made=41, done=40)
    job.look(1)
    assert job.look(11) is not None and job.stops == 1
    assert "stopping the job" in job.said[-1] and VERDICT in job.said[-1]


def test_a_short_wait_is_info_a_longer_one_a_warning_then_an_error(tmp_path):
    # Rank 0 sits in time.sleep (saving a checkpoint) while rank 1 waits in barrier: how
    # long rank 1 has waited, by its agent, grades the verdict (analysis.severity).
    from mldebug.collect.agentstate import parse_state

    def graded(waited: float):
        snapshot = stacks_snapshot({0: IN_SLEEP, 1: IN_ALL_REDUCE})
        agents = {101: parse_state(agent_state(1, 5, 4, waited), 1)}
        agents[100] = parse_state(agent_state(0, 4, 4, 0.0), 0)
        targets = [view.target for view in snapshot.ranks]
        samples = {
            t.pid: tuple(
                StackSample(
                    t, 999.2 + 0.4 * i, threads=view.threads, cpu_seconds=1.0, main_cpu_seconds=1.0
                )
                for i in range(3)
            )
            for t, view in zip(targets, snapshot.ranks, strict=True)
        }
        return build_snapshot(targets, samples, 2, now=1000.0, agents=agents).findings[0]

    short, longer, long = graded(1.2), graded(7.0), graded(30.0)
    assert short.severity == "info" and "rank 0" in short.summary
    assert finding_text(short).endswith("(for 1.2 s so far: a pause that short is not a hang)")
    assert longer.severity == "warning" and "for 7.0 s so far" in finding_text(longer)
    assert long.severity == "error" and long.waited == 30.0
    assert finding_text(long).endswith("(the waiting ranks have waited 30 s)")


def test_a_rank_still_for_a_moment_after_its_last_step_is_pausing_not_stuck(tmp_path):
    # Rank 0 sits in time.sleep (a checkpoint) while rank 1 computes: "does not move and is
    # in no collective", graded by how long rank 0's agent has seen no progress.
    from mldebug.collect.agentstate import parse_state

    def stuck(idle: float | None):
        snapshot = stacks_snapshot({0: IN_SLEEP, 1: EVALUATING}, busy={1})
        agents = {101: parse_state(agent_state(1, 4, 4, 0.0), 1)}
        if idle is not None:
            agents[100] = parse_state(agent_state(0, 4, 4, idle), 0)
        targets = [view.target for view in snapshot.ranks]
        samples = {
            t.pid: tuple(
                StackSample(
                    t,
                    999.2 + 0.4 * i,
                    threads=view.threads,
                    cpu_seconds=1.0 + (i if t.rank == 1 else 0),
                    main_cpu_seconds=1.0 + (i if t.rank == 1 else 0),
                )
                for i in range(3)
            )
            for t, view in zip(targets, snapshot.ranks, strict=True)
        }
        found = build_snapshot(targets, samples, 2, now=1000.0, agents=agents).findings
        return next(f for f in found if f.kind == "stuck")

    pausing, still, unknown = stuck(1.5), stuck(8.0), stuck(None)
    assert pausing.severity == "info" and pausing.ranks == (0,)
    assert finding_text(pausing).endswith("(for 1.5 s so far: a pause that short is not a hang)")
    assert still.severity == "warning" and "so far" not in finding_text(still)
    assert unknown.severity == "warning"  # no agent says how long: the stacks decide


def test_a_wait_too_short_for_a_hang_is_looked_at_again_later(tmp_path):
    job = Job(tmp_path, on_hang=ON_HANG_STOP, timeout=10)
    job.snapshot = stacks_snapshot({0: IN_SLEEP, 1: IN_SLEEP})  # stuck, no collective: warning
    write_state(job.paths, 0, step=5, made=9, done=9)
    job.look(0)
    assert job.look(11) is None and job.stops == 0
    assert "not a hang yet" in job.said[0] and "looking again in 10s" in job.said[0]
    assert job.look(5) is None and job.dumps == 1  # not before another timeout
    job.snapshot = HUNG  # the wait grew: now it is a hang
    assert job.look(6) is not None and job.stops == 1


def test_on_hang_stop_looks_once_more_and_keeps_a_job_that_moved_meanwhile(tmp_path):
    job = Job(tmp_path, on_hang=ON_HANG_STOP, timeout=10)
    write_state(job.paths, 0, step=5, made=9, done=8)

    def moving_dump(root):  # the job moves on while the dump reads it
        write_state(job.paths, 0, step=6, made=10, done=10)
        return HUNG, ()

    job.watchdog._dump = moving_dump
    job.look(0)
    job.look(11)
    assert job.stops == 0
    assert "moved again before it was stopped: it keeps running" in job.said[0]


# -- real jobs: a long evaluation is no hang, a real hang is; leaks; readers that meet ------
#
# Two gloo jobs (tests/jobs/trust_jobs.py) start together, once for the module (importing torch
# in four ranks is the slow part), and the fixture watches both while they run:
#   A  `mldebug run --hang-timeout 10 --on-hang stop`: AdamW, rank 0 keeps each step's error
#      with its graph (~150 KB a step), two 13 s evaluations without a collective, then
#      rank 1 skips an all_reduce and waits in time.sleep: a real hang;
#   B  no optimizer (a hand-written update, no step counted), rank 1 leaks the same way, then
#      rank 0 skips an all_reduce: a hang nobody stops, read by 8 `mldebug dump` at once;
#   C  healthy, 45 s under `--hang-timeout 10 --on-hang stop`, dumped at every round: DataLoader
#      workers, AdamW (start-up included), a 1.5 s checkpoint pause on rank 0 every 25 steps,
#      a 12 s evaluation every 20 s, GC pauses, step-time jitter, warm-up allocation, the
#      allocator growing and trimming. It must get no warning, no error, and end by itself.
#      (benchmarks/bench_memory_growth.py runs it for 3 minutes.)

JOBS = Path(__file__).parent / "jobs" / "trust_jobs.py"
WAIT_LINE = next(i for i, line in enumerate(JOBS.read_text().splitlines(), 1) if "# WAIT" in line)


def _dump(run_dir: Path, *options: str) -> tuple[int, dict]:
    return dump_json(run_dir, *options)


def _dump_process(run_dir: Path) -> tuple[int, dict]:
    """`mldebug dump` as a process of its own: several at once, as separate users' are."""
    done = subprocess.run(
        [sys.executable, "-m", "mldebug", "dump", "--run", str(run_dir), "--json"],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads(done.stdout)


def _dump_healthy(job: subprocess.Popen, run_dir: Path, seen: list) -> None:
    """Dump the healthy job C once; a job whose ranks have not started yet (on a loaded
    machine they import torch for a while) or that ended between the poll and the dump is
    not a finding (dump says so with exit 3, "no live ranks"), anything else is recorded."""
    code, printed = dump_here(run_dir, "--json")
    if code == 3 and not all("READY" in _log(run_dir, rank) for rank in (0, 1)):
        return  # not started yet
    if code == 3 and job.wait(timeout=60) == 0:
        return  # it ended by itself, as it should
    assert code in (0, 1), (code, printed[-2000:])
    report = json.loads(printed)
    found = [f for f in report["findings"] if f["severity"] != "info"]
    if found:  # each rank as read, for the assertion's message
        found[0]["ranks_read"] = [
            (r.get("rank"), r.get("state"), r.get("detail")) for r in report.get("ranks", [])
        ]
    seen.append((code, found))


def _log(run_dir: Path, rank: int) -> str:
    path = run_dir / "ranks" / str(rank) / "stdout.log"
    return path.read_text() if path.exists() else ""


def _growth(findings: list[dict]) -> dict | None:
    """The growth found from time (its rate and forecast), not the per-step rule's line,
    which may speak first on a job that counts steps."""
    return next(
        (f for f in findings if f["kind"] == "memory_growth" and ") grows " in f["summary"]),
        None,
    )


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("trust")
    # The first phase lasts until the test has named the leak (or its 90 s are over): a
    # loaded machine makes steps slow, never the phase shorter than what it waits for.
    env = {**os.environ, "TRAIN_S": "150", "NO_COLOR": "1"}
    go = {name: tmp / f"{name}.phase-over" for name in ("a", "b")}
    base = [sys.executable, "-m", "mldebug", "run", "--nproc-per-node", "2"]
    err_a = open(tmp / "a.err", "w+")  # noqa: SIM115 (read after the job ended)
    job_a = subprocess.Popen(
        [*base, "--run-dir", str(tmp / "a"), "--hang-timeout", "10", "--on-hang", "stop"]
        + [str(JOBS), "evaluate"],
        cwd=tmp,
        env={**env, "FIRST_PHASE_UNTIL": str(go["a"])},
        stdout=subprocess.DEVNULL,
        stderr=err_a,
        start_new_session=True,
    )
    job_b = subprocess.Popen(
        [*base, "--run-dir", str(tmp / "b"), str(JOBS), "bare"],
        cwd=tmp,
        env={**env, "FIRST_PHASE_UNTIL": str(go["b"])},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    job_c = subprocess.Popen(
        [*base, "--run-dir", str(tmp / "c"), "--hang-timeout", "10", "--on-hang", "stop"]
        + [str(JOBS), "healthy", "45"],
        cwd=tmp,
        env={**env, "EVAL_EVERY": "20"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    seen: dict = {"a": None, "b": None, "census": None, "concurrent": None, "c": []}
    try:
        deadline = time.monotonic() + 400
        ready: dict = {}
        # While they train: `dump` until the leak is named, on each job.
        while time.monotonic() < deadline and not (seen["a"] and seen["b"]):
            for name, run_dir, rank in (("a", tmp / "a", 0), ("b", tmp / "b", 1)):
                if seen[name] or "READY" not in _log(run_dir, rank):
                    continue
                ready.setdefault(name, time.monotonic())
                if time.monotonic() - ready[name] > 90:
                    seen[name] = ("late", None)  # not named in 90 s of training: missed
                    continue
                _code, report = _dump(run_dir)
                found = _growth(report["findings"])
                if found is not None:
                    seen[name] = (time.monotonic() - ready[name], found)
            if seen["a"]:
                go["a"].touch()  # A goes on to its evaluations and its hang
            # C: a dump every 3 s (a user's `watch`), the CPU left to the jobs between them
            if job_c.poll() is None and (tmp / "c" / "ranks").exists() and _due(seen, 3):
                _dump_healthy(job_c, tmp / "c", seen["c"])
            time.sleep(1)
        # B: what is growing, asked for (the census)
        _code, report = _dump(tmp / "b", "--census")
        seen["census"] = report
        go["b"].touch()  # B goes on to its hang
        # B hangs: eight dumps at once, as a user's watch, attach and a watchdog would.
        hang_by = time.monotonic() + 120
        while "HANGING" not in _log(tmp / "b", 0) and time.monotonic() < hang_by:
            time.sleep(0.5)
        time.sleep(12)  # the others have waited longer than a hang needs (analysis.severity)
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            seen["concurrent"] = list(pool.map(lambda _: _dump_process(tmp / "b"), range(8)))
        seen["b_states"] = _states(tmp / "b")
        while job_c.poll() is None and time.monotonic() < deadline:
            _dump_healthy(job_c, tmp / "c", seen["c"])
            time.sleep(2)
        seen["c_exit"] = job_c.wait(timeout=60)
        seen["c_err"] = job_c.stderr.read()
        code_a = job_a.wait(timeout=max(30, deadline - time.monotonic()))
        err_a.seek(0)
        seen["a_exit"], seen["a_err"] = code_a, err_a.read()
        yield seen, tmp
    finally:
        for proc in (job_a, job_b, job_c):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        err_a.close()


def _due(seen: dict, seconds: float) -> bool:
    """True at most once every `seconds` (the last time kept in `seen`)."""
    now = time.monotonic()
    if now - seen.get("c_last", -seconds) < seconds:
        return False
    seen["c_last"] = now
    return True


def _states(run_dir: Path) -> list[str]:
    """The process state of each rank (R, S, T...), from /proc, by the pids in proc.json."""
    states = []
    for rank in (0, 1):
        pid = json.loads((run_dir / "ranks" / str(rank) / "proc.json").read_text())["pid"]
        with open(f"/proc/{pid}/status") as status:
            states.append(next(ln for ln in status if ln.startswith("State:")).split()[1])
    return states


@pytest.mark.multirank
def test_a_long_evaluation_is_not_a_hang_and_is_learned(live):
    seen, tmp = live
    err = seen["a_err"]
    assert "EVAL 2 DONE" in _log(tmp / "a", 0), err  # both evaluations ran: nothing stopped it
    working = [ln for ln in err.splitlines() if "not a hang" in ln and "computing in" in ln]
    evaluating = [ln for ln in working if "computing in evaluate (" in ln]
    assert len(evaluating) <= 1, err  # said once; the second evaluation is learned
    assert not [ln for ln in err.splitlines() if "stopping the job" in ln][1:], err


@pytest.mark.multirank
def test_a_healthy_job_gets_no_warning_and_is_never_stopped(live):
    seen, tmp = live
    assert seen["c_exit"] == 0, seen["c_err"]
    assert "DONE" in _log(tmp / "c", 0)
    assert len(seen["c"]) >= 5  # dumped all along, start-up included
    assert [found for _code, found in seen["c"] if found] == [], [
        [(x["kind"], x["summary"], x.get("ranks_read")) for x in f] for _c, f in seen["c"] if f
    ]
    assert {code for code, _ in seen["c"]} == {0}
    hangs = [ln for ln in seen["c_err"].splitlines() if ln.startswith("mldebug: no progress")]
    assert hangs == [], seen["c_err"]


@pytest.mark.multirank
def test_a_real_hang_in_the_same_job_is_reported_and_stopped(live):
    seen, tmp = live
    err = seen["a_err"]
    lines = [ln for ln in err.splitlines() if ln.startswith("mldebug: no progress for 10s")]
    assert len(lines) == 1, err
    assert "verdict:" in lines[0] and "rank 1" in lines[0], err
    assert seen["a_exit"] == 124, err
    assert "mldebug: job stopped: no progress for 10s (--on-hang stop)" in err
    manifest = json.loads((tmp / "a" / "run.json").read_text())
    (hang,) = manifest["hangs"]
    assert "rank 1" in hang["verdict"]
    text = Path(hang["report"]).read_text()
    assert f"{JOBS}:{WAIT_LINE}" in text  # where rank 1 is: the culprit's own line


@pytest.mark.multirank
@pytest.mark.parametrize("name, rank", [("a", 0), ("b", 1)], ids=["adamw", "no-optimizer"])
def test_a_150_kb_a_step_leak_on_one_rank_is_named_within_60_s_with_rate_and_forecast(
    live, name, rank
):
    seen, _tmp = live
    assert seen[name] is not None and seen[name][0] != "late", seen[name]
    after, found = seen[name]
    assert after <= 60, (after, found)
    assert found["ranks"] == [rank] and found["severity"] == "warning", found
    summary = found["summary"]
    assert summary.startswith(f"rank {rank}: memory (RSS) grows "), summary
    assert "/s" in summary and f"while rank {1 - rank} stays flat" in summary, summary
    assert "at this rate it reaches" in summary and " in " in summary.split("reaches")[1]
    if name == "a":
        assert "a step)" in summary  # AdamW counts steps: the rate per step too


@pytest.mark.multirank
def test_the_census_names_the_leaking_tensors_kind(live):
    seen, _tmp = live
    findings = seen["census"]["findings"]
    texts = [f["summary"] for f in findings] + [f.get("detail", "") for f in findings]
    texts += [p["label"] for f in findings for p in f.get("parts", [])]
    named = [t for t in texts if "rank 1 holds" in t and "0-d float32 tensors" in t]
    assert named, findings
    assert "grad_fn=MeanBackward0" in named[0] and "a loss kept without .item()" in named[0]
    # what holds them: the job's own list, by its name, in the function it is in now
    assert re.search(
        r"; held by a list of [\d,]+ items, `kept`, a local of \w+\(\) at "
        r"trust_jobs\.py:\d+",
        named[0],
    ), named[0]


@pytest.mark.multirank
def test_eight_dumps_at_once_agree_and_leave_no_rank_stopped(live):
    seen, _tmp = live
    results = seen["concurrent"]
    codes = {code for code, _ in results}
    # The same finding first, for the same ranks, at the same severity (its text may say a
    # second more of waiting from one to the next).
    verdicts = {
        (f["kind"], tuple(f["ranks"]), f["severity"], f.get("location"))
        for f in (report["findings"][0] for _, report in results)
    }
    assert codes == {1}, [(c, r["findings"][:1]) for c, r in results]
    assert len(verdicts) == 1, verdicts
    assert verdicts.pop()[1] == (0,)
    for _, report in results:
        for finding in report["findings"]:
            assert "refused" not in finding["summary"] and "stopped" not in finding["summary"]
    assert all(state in ("R", "S") for state in seen["b_states"]), seen["b_states"]


# -- analysis.progress: which ranks move, by their agents' states ----------------------------


def test_moving_ranks_are_those_whose_step_or_collective_count_moved(tmp_path):
    from mldebug.analysis.progress import moving_now, moving_ranks
    from mldebug.collect.agentstate import read_state

    paths = RunPaths(make_private_dir(tmp_path / "run"))
    for rank in range(3):
        write_state(paths, rank, step=1, made=4, done=4, beat=100.0)
    before = {rank: read_state(paths.root, rank) for rank in range(3)}
    write_state(paths, 0, step=2, made=4, done=4, beat=101.0)  # a step
    write_state(paths, 1, step=1, made=5, done=4, beat=101.0)  # a collective made
    write_state(paths, 2, step=1, made=4, done=4, beat=101.0)  # a heartbeat only
    after = {rank: read_state(paths.root, rank) for rank in range(3)}
    assert moving_ranks(before, after) == {0, 1}
    assert moving_ranks({}, after) == set()  # a first reading is no progress yet
    # From one reading: the newest call was made at the heartbeat (write_state's `beat`).
    assert moving_now(after[1], now=101.5)
    assert not moving_now(after[1], now=160.0)  # the agent stopped beating


# -- the look and its threshold, shared by dump and the watchdog -------------------------------


def test_the_runs_hang_timeout_sets_the_threshold_for_dump_and_watchdog_alike(tmp_path):
    from mldebug.observe.look import hang_threshold, run_hang_after

    paths = RunPaths(make_private_dir(tmp_path / "run"))
    assert run_hang_after(paths.root) is None  # no run.json
    write_json_atomic(paths.manifest, {"options": {"hang_timeout": 8.0}})
    assert run_hang_after(paths.root) == hang_threshold(8.0) == 6.0
    write_json_atomic(paths.manifest, {"options": {"hang_timeout": 600}})
    assert run_hang_after(paths.root) == 10.0  # never later than the default
    for bad in (None, "8", True, -3, float("inf")):
        write_json_atomic(paths.manifest, {"options": {"hang_timeout": bad}})
        assert run_hang_after(paths.root) is None, bad


def test_a_dump_that_read_no_rank_is_no_hang_to_stop_on():
    from mldebug.analysis.quiet import UNSURE, judge_quiet
    from mldebug.model import FAIL_PERMISSION

    target = RankTarget(pid=100, rank=0, world_size=1)
    refused = StackSample(target, 1000.0, failure=FAIL_PERMISSION, failure_detail="ptrace refused")
    snapshot = build_snapshot([target], {100: (refused,)}, 1, now=1000.0)
    assert snapshot.findings[0].severity == "error"  # nothing read: an error for dump...
    assert judge_quiet(snapshot).kind == UNSURE  # ...but no hang for the watchdog to act on


def test_without_an_agent_the_stacks_severity_stands():
    assert HUNG.findings[0].severity == "error"  # no agent says how long: not graded down
