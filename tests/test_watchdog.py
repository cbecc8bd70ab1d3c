"""The hang watchdog of `mldebug run --hang-timeout`: what counts as progress, when it fires,
what it writes and says, and keep/stop.

The unit tests give the watchdog a run directory with ranks/<rank>/state.json files written
as docs/agent.md says the in-rank agent writes them (the real agent, mldebug/agent/, was not
writing them yet when these were written), a clock the test moves, and a dump that returns a
fixed snapshot; the reports are rendered by the real `dump` renderers. The last test runs a
real hung 2-rank gloo job under `mldebug run` that nobody dumps.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from mldebug.launch.watchdog import ON_HANG_KEEP, ON_HANG_STOP, HangWatchdog, progress_token
from mldebug.model import Finding, JobSnapshot
from mldebug.rundir import RunPaths
from mldebug.safeio import make_private_dir, write_json_atomic

VERDICT = "rank 1 is not in the all_reduce that ranks 0,2-3 wait in"


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

        def fixed_dump(root):
            self.dumps += 1
            finding = Finding("outlier", (1,), VERDICT, location="/job/t.py:30")
            return JobSnapshot(time=1.0, ranks=(), findings=(finding,), run_dir=str(root)), ()

        self.watchdog = HangWatchdog(
            self.paths,
            timeout,
            on_hang,
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
    assert f"Verdict: {VERDICT}" in text  # dump's own text report
    data = json.loads(report.json_path.read_text())
    assert data["verdict"] == VERDICT and data["findings"][0]["ranks"] == [1]
    assert data["no_progress_for"] == 61.0
    (message,) = job.said
    assert message.startswith(f"mldebug: no progress for 60s; verdict: {VERDICT} (/job/t.py:30)")
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
    report = job.look(61)
    assert "py-spy is not installed" in report.text_path.read_text()
    assert json.loads(report.json_path.read_text())["verdict"] is None
    assert "no dump (py-spy is not installed)" in job.said[0]


def test_reports_of_two_hangs_in_one_second_do_not_overwrite_each_other(tmp_path):
    job = Job(tmp_path)
    first = job.watchdog.fire(61)
    second = job.watchdog.fire(61)
    assert first.text_path != second.text_path
    assert first.text_path.exists() and second.text_path.exists()


# -- a real hung job nobody dumped ------------------------------------------------------------

HUNG_JOB = textwrap.dedent(
    """\
    import time
    import torch
    import torch.distributed as dist

    def wait_for_checkpoint():
        while True:
            time.sleep(0.2)  # WAIT

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    for step in range(5):
        if rank == 1 and step == 3:
            continue  # rank 1 skips one all_reduce
        tensor = torch.ones(4)
        dist.all_reduce(tensor)  # ALL_REDUCE
        print(f"step {step}", flush=True)
    wait_for_checkpoint()
    """
)
WAIT_LINE = HUNG_JOB.splitlines().index("        time.sleep(0.2)  # WAIT") + 1


@pytest.fixture(scope="module")
def hung_job(tmp_path_factory):
    """`mldebug run --hang-timeout 8 --on-hang stop` on a job that hangs after a few steps."""
    tmp = tmp_path_factory.mktemp("hung")
    (tmp / "job.py").write_text(HUNG_JOB)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mldebug",
            "run",
            "--run-dir",
            str(tmp / "run"),
            "--nproc-per-node",
            "2",
            "--hang-timeout",
            "8",
            "--on-hang",
            "stop",
            "job.py",
        ],
        cwd=tmp,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, out.decode(), err.decode(), RunPaths(tmp / "run"), tmp / "job.py"


@pytest.mark.multirank
def test_a_hung_job_nobody_dumped_gets_a_report_and_a_verdict_on_the_console(hung_job):
    code, _out, err, paths, script = hung_job
    lines = [line for line in err.splitlines() if line.startswith("mldebug: no progress for 8s")]
    assert len(lines) == 1, err
    assert "verdict:" in lines[0] and "rank 1" in lines[0], err
    reports = sorted(os.listdir(paths.reports_dir))
    assert [name.rsplit(".", 1)[1] for name in reports] == ["json", "txt"], reports
    text = (paths.reports_dir / reports[1]).read_text()
    assert text.split("\n")[1].startswith("Verdict:")
    assert f"{script}:{WAIT_LINE}" in text  # where rank 1 is: the culprit's own line
    data = json.loads((paths.reports_dir / reports[0]).read_text())
    assert 1 in data["findings"][0]["ranks"]
    assert f"report: {paths.reports_dir / reports[1]}" in err


@pytest.mark.multirank
def test_on_hang_stop_ends_the_job_with_code_124_and_run_json_says_why(hung_job):
    code, _out, err, paths, _script = hung_job
    assert code == 124, err
    assert "mldebug: job stopped: no progress for 8s (--on-hang stop)" in err
    manifest = json.loads(paths.manifest.read_text())
    assert manifest["status"] == "failed" and manifest["exit_code"] == 124
    assert manifest["options"]["hang_timeout"] == 8.0
    (hang,) = manifest["hangs"]
    assert hang["report"].endswith(".txt") and "rank 1" in hang["verdict"]


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
