"""`mldebug dump --json` against real 4-rank gloo jobs started with plain torchrun.

Each job hangs in its own way (tests/jobs/hang_job.py MODE); all are started at once by one
module-scoped fixture, because importing torch in 4 ranks takes a while on a small machine.
"""

import json
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path

import psutil
import pytest
from testkit.ports import launcher_port

pytestmark = [pytest.mark.long, pytest.mark.multirank, pytest.mark.timeout(600)]

VENV_BIN = Path(sys.executable).parent
TORCHRUN = VENV_BIN / "torchrun"
JOB = Path(__file__).parent / "jobs" / "hang_job.py"
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
MODES = ("straggler", "outliers", "missing", "healthy", "dataloader")
NPROC = 4
# Each job as few ranks as its case needs (a rank's torch import is most of a job's CPU):
# 5 in outliers, a fifth rank burns CPU in C code; 4 where the example says so.
NPROC_OF = {"outliers": 5, "dataloader": 3, "straggler": 3, "missing": 3, "healthy": 2}
# The jobs that compute without end (the healthy one trains, an outlier spins) are stopped
# once ready and go on only for their tests: the other jobs and tests get the CPU meanwhile.
COMPUTING = ("healthy", "outliers")


def line_of(marker: str, script: Path = JOB) -> str:
    lines = script.read_text().splitlines()
    return f"{script}:{next(i for i, text in enumerate(lines, 1) if marker in text)}"


class Job:
    """A torchrun job, ready once its log shows `marker` `expected` times."""

    def __init__(
        self,
        mode: str,
        log: Path,
        script: Path = JOB,
        marker: str = "READY",
        expected: int | None = None,
        nproc: int = NPROC,
    ):
        self.mode = mode
        self.port = launcher_port()
        self.log = log
        self.marker = marker
        args = [mode] if script == JOB else []
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [
                    str(TORCHRUN),
                    "--nproc-per-node",
                    str(nproc),
                    "--master-port",
                    str(self.port),
                    str(script),
                    *args,
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.expected = expected or (nproc - 1 if mode == "missing" else nproc)

    def ready(self) -> bool:
        return self.log.read_text(errors="replace").count(self.marker) >= self.expected

    def tail(self, lines: int = 30) -> str:
        """The end of its log, for a failure's message."""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def ranks(self) -> list[psutil.Process]:
        """The job's ranks and their workers (torchrun's descendants)."""
        try:
            return psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.Error:
            return []

    def hold(self, held: bool) -> None:
        """Stop (or continue) the job's ranks and their workers; torchrun goes on."""
        for proc in self.ranks():
            try:
                proc.send_signal(signal.SIGSTOP if held else signal.SIGCONT)
            except psutil.Error:
                pass

    def stop(self) -> None:
        # torchrun starts each rank in a session of its own: kill their groups too.
        ranks = self.ranks()
        for pid in [self.proc.pid, *(r.pid for r in ranks)]:
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self.proc.wait()


def wait_until_settled(job: Job, timeout: float = 30) -> None:
    """Until every rank process of the job either sits (no CPU over a window) or spins
    (CPU all through it, a busy outlier): one that used a little is still on its way."""
    deadline = time.monotonic() + timeout
    window = 0.3
    while time.monotonic() < deadline:
        try:
            procs = psutil.Process(job.proc.pid).children(recursive=True)
            before = [sum(p.cpu_times()[:2]) for p in procs]
            time.sleep(window)
            after = [sum(p.cpu_times()[:2]) for p in procs]
        except psutil.Error:
            return
        if all(b == a or a - b > window / 2 for b, a in zip(before, after, strict=True)):
            return


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    logs = tmp_path_factory.mktemp("jobs")
    started = {
        mode: Job(mode, logs / f"{mode}.log", nproc=NPROC_OF.get(mode, NPROC)) for mode in MODES
    }
    started["example_skip"] = Job(
        "example_skip",
        logs / "skip.log",
        EXAMPLES / "skip_collective.py",
        "rank 1 finished training",
        1,
    )
    started["example_mismatch"] = Job(
        "example_mismatch",
        logs / "mismatch_ex.log",
        EXAMPLES / "mismatched_collectives.py",
        "step 0 done",
        1,
    )
    try:
        deadline = time.monotonic() + 480
        held: set[str] = set()
        while True:
            # A computing job is held as soon as it is ready, the last one to get ready too
            # (held only while others were not ready, one ready last trained through the tests).
            everyone = all(job.ready() for job in started.values())
            for mode in set(COMPUTING) - held:  # its CPU to the others' start meanwhile
                if started[mode].ready():
                    started[mode].hold(True)
                    held.add(mode)
            if everyone:
                break
            failed = {j.mode: j.tail() for j in started.values() if j.proc.poll() is not None}
            assert not failed, f"jobs ended early: {failed}"
            assert time.monotonic() < deadline, "jobs did not get ready in time"
            time.sleep(1)
        for mode, job in started.items():
            if mode == "healthy":
                continue  # it trains: no place to reach
            # the last rank to print READY is then in its wait (or its spin)
            with running(job) if mode in COMPUTING else nullcontext():
                wait_until_settled(job)
        yield started
    finally:
        for job in started.values():
            job.stop()


@contextmanager
def running(job: Job):
    job.hold(False)
    try:
        yield
    finally:
        job.hold(True)


def dump_json(job: Job) -> tuple[int, dict]:
    done = subprocess.run(
        [str(VENV_BIN / "mldebug"), "dump", "--pid", str(job.proc.pid), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)


def errors(report: dict) -> list[dict]:
    return [f for f in report["findings"] if f["severity"] == "error"]


def test_rank_that_never_reaches_the_collective(jobs):
    code, report = dump_json(jobs["straggler"])
    assert code == 1
    (finding,) = errors(report)
    assert finding["kind"] == "outlier" and finding["ranks"] == [2]
    assert finding["location"] == line_of("STRAGGLER_LINE")
    assert finding["recipe"] == "rank-outside-collective"
    assert "all_reduce" in finding["summary"]


def test_lock_dataloader_and_busy_outliers(jobs):
    with running(jobs["outliers"]):
        code, report = dump_json(jobs["outliers"])
    assert code == 1
    found = {tuple(f["ranks"]): f["location"] for f in errors(report)}
    assert found == {
        (1,): line_of("LOCK_LINE"),
        (2,): line_of("GETITEM_LINE"),
        (3,): line_of("BUSY_LINE"),
    }
    assert all(f["kind"] == "outlier" for f in errors(report))
    states = {r["rank"]: r["state"] for r in report["ranks"]}
    assert states == {0: "stuck", 1: "stuck", 2: "stuck", 3: "running", 4: "stuck"}
    busy = next(f for f in errors(report) if f["ranks"] == [3])
    assert "it is busy in crunch" in busy["summary"]
    waiting = [r["rank"] for r in report["ranks"] if r["collective"] == "all_reduce"]
    assert waiting == [0, 4]


def test_rank_stuck_in_a_dataloader_worker_is_named_with_the_workers_line(jobs):
    # GIVEN 3 ranks reading batches with num_workers=2, rank 2's dataset blocking in its workers
    job = jobs["dataloader"]
    rank2 = next(
        p for p in psutil.Process(job.proc.pid).children() if p.environ().get("RANK") == "2"
    )
    workers = {c.pid for c in rank2.children()}
    # WHEN the job is dumped
    code, report = dump_json(job)
    # THEN the verdict names rank 2 and the dataset's line in a worker, not the loader loop
    assert code == 1
    (finding,) = errors(report)
    assert (finding["kind"], finding["ranks"]) == ("outlier", [2])
    assert finding["location"] == line_of("WORKER_GETITEM_LINE")
    assert "waits for its DataLoader, whose worker (pid" in finding["summary"]
    assert "while ranks 0-1 wait in all_reduce" in finding["summary"]
    ranks = {r["rank"]: r for r in report["ranks"]}
    assert ranks[2]["dataloader_worker"] in workers
    assert ranks[2]["location"] == line_of("WORKER_GETITEM_LINE")
    worker_threads = [t for t in ranks[2]["threads"] if t["pid"] is not None]
    assert {t["pid"] for t in worker_threads} == workers  # both workers, no other child
    assert all(t["name"] == f"DataLoader worker {t['pid']}" for t in worker_threads)
    # the ranks in all_reduce do not wait for their loaders: their workers are not read
    assert all(t["pid"] is None for r in (0, 1) for t in ranks[r]["threads"])
    assert ranks[0]["location"] == ranks[1]["location"] == line_of("ALL_REDUCE_LINE")


def test_mismatched_collectives(jobs):
    # examples/mismatched_collectives.py: ranks 0-1 log with all_gather, ranks 2-3 do not
    code, report = dump_json(jobs["example_mismatch"])
    assert code == 1
    (finding,) = errors(report)
    assert finding["kind"] == "mismatch" and finding["ranks"] == [0, 1, 2, 3]
    sides = {(p["label"], tuple(p["ranks"]), p["location"]) for p in finding["parts"]}
    example = EXAMPLES / "mismatched_collectives.py"
    assert sides == {
        ("all_gather", (0, 1), line_of("dist.all_gather(gathered, loss)", example)),
        ("all_reduce", (2, 3), line_of("dist.all_reduce(grad)", example)),
    }


def test_rank_missing_from_rendezvous(jobs):
    code, report = dump_json(jobs["missing"])
    assert code == 1
    missing, rendezvous = errors(report)
    assert missing["kind"] == "missing" and missing["ranks"] == [2]
    assert rendezvous["kind"] == "rendezvous" and rendezvous["ranks"] == [0, 1]
    assert rendezvous["recipe"] == "rendezvous-hang"
    assert rendezvous["location"] == line_of('dist.init_process_group("gloo")')


def test_healthy_job_is_not_called_hung(jobs):
    with running(jobs["healthy"]):
        code, report = dump_json(jobs["healthy"])
    assert code == 0, report["findings"]
    assert errors(report) == []
    assert [f["kind"] for f in report["findings"]] == ["progressing"]


def test_torchrun_pid_expands_to_its_four_ranks(jobs):
    job = jobs["example_mismatch"]
    children = sorted(p.pid for p in psutil.Process(job.proc.pid).children())
    _, report = dump_json(job)
    assert sorted(r["pid"] for r in report["ranks"]) == children
    assert [r["rank"] for r in report["ranks"]] == [0, 1, 2, 3]
    assert report["world_size"] == 4


def test_no_target_with_several_jobs_lists_them(jobs, tmp_path):
    env = {**os.environ, "MLDEBUG_RUNS_DIR": str(tmp_path)}  # no `mldebug run` jobs here
    done = subprocess.run(
        [str(VENV_BIN / "mldebug"), "dump"], capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 3
    assert "jobs; say which one" in done.stderr
    for job in jobs.values():
        assert f"MASTER_PORT={job.port}" in done.stderr
    assert "--pid" in done.stderr


def test_examples_say_what_their_docstrings_promise(jobs):
    _, report = dump_json(jobs["example_skip"])
    (finding,) = errors(report)
    assert (finding["kind"], finding["ranks"]) == ("outlier", [1])
    assert finding["location"].startswith(str(EXAMPLES / "skip_collective.py"))
    # (the mismatch example: test_mismatched_collectives)
