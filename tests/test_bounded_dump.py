"""`mldebug dump` does bounded work whatever the job and its run directory hold.

Each process is read once per sample however many ranks name it, at most MAX_PIDS of them;
the whole dump ends by its deadline however many ranks hang py-spy; FIFOs, sparse huge
files and deeply nested JSON in the run directory cost neither a hang nor memory nor a
traceback. py-spy is replaced by a fake (tests/testkit/pyspy_fakes.py); the analysis is the real one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from testkit.pyspy_fakes import calls, fake_pyspy, sleepers, stop

from mldebug.collect import collector as collector_module
from mldebug.collect import workers
from mldebug.commands import dump as dump_command
from mldebug.model import STATE_STUCK, STATE_UNREADABLE, JobTargets, RankTarget
from mldebug.observe.pyspy import JobObserver, observe_once

MLDEBUG = [sys.executable, "-m", "mldebug"]


def dump(*args: str, pyspy: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*MLDEBUG, "dump", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "MLDEBUG_PYSPY": pyspy},
    )


@pytest.fixture
def procs():
    started: list[subprocess.Popen] = []

    def start(count: int, run_dir: Path | None = None) -> list[int]:
        new = sleepers(count, run_dir)
        started.extend(new)
        return [p.pid for p in new]

    yield start
    stop(started)


def test_a_process_that_500_ranks_name_is_read_once_per_sample(tmp_path, procs):
    (pid,) = procs(1)
    pyspy, log = fake_pyspy(tmp_path)
    targets = tuple(RankTarget(pid=pid, rank=rank, world_size=500) for rank in range(500))
    snapshot, _ = observe_once(
        JobTargets(targets, world_size=500), pyspy=pyspy, samples=3, interval=0.0
    )
    assert calls(log) == [pid, pid, pid]  # was 1,500 readings: the process paused 1,500 times
    assert len(snapshot.ranks) == 500
    assert {view.state for view in snapshot.ranks} == {STATE_STUCK}


def test_at_most_max_pids_processes_are_read_and_the_others_say_why(tmp_path, procs):
    pids = procs(4)
    pyspy, log = fake_pyspy(tmp_path)
    targets = tuple(RankTarget(pid=pid, rank=rank, world_size=4) for rank, pid in enumerate(pids))
    with JobObserver(JobTargets(targets, 4), pyspy=pyspy, samples=1, max_pids=2) as observer:
        snapshot = observer.poll()
    assert sorted(calls(log)) == sorted(pids[:2])
    unread = [view for view in snapshot.ranks if view.state == STATE_UNREADABLE]
    assert [view.rank for view in unread] == [2, 3]
    assert "at most 2 processes" in unread[0].detail


def test_dump_notes_when_it_reads_only_some_of_the_processes(tmp_path, procs, monkeypatch, capsys):
    pids = procs(3)
    pyspy, log = fake_pyspy(tmp_path)
    monkeypatch.setenv("MLDEBUG_PYSPY", pyspy)
    monkeypatch.setattr(collector_module, "MAX_PIDS", 2)
    args = [arg for pid in pids for arg in ("--pid", str(pid))]
    dump_command.main([*args, "--samples", "1"])
    out = capsys.readouterr().out
    assert "3 processes to read: a dump reads the first 2" in out
    assert len(calls(log)) == 2


def test_a_world_size_of_a_million_makes_no_million_missing_ranks(
    tmp_path, procs, monkeypatch, capsys
):
    (pid,) = procs(1)
    pyspy, _ = fake_pyspy(tmp_path)
    monkeypatch.setenv("MLDEBUG_PYSPY", pyspy)
    monkeypatch.setattr(collector_module, "MAX_WORLD", 100)
    monkeypatch.setattr(
        dump_command,
        "_targets_from_args",
        lambda pids, run: JobTargets((RankTarget(pid=pid, rank=0, world_size=1 << 20),), 1 << 20),
    )
    dump_command.main(["--pid", str(pid), "--samples", "1", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert len(report["ranks"]) == 100
    assert report["findings"][0]["kind"] == "missing"
    dump_command.main(["--pid", str(pid), "--samples", "1"])
    assert "world size 1048576: only ranks 0-99 are accounted for" in capsys.readouterr().out


def test_a_dump_of_many_hung_ranks_ends_by_its_deadline(tmp_path, procs):
    pids = procs(40)  # more than the 32 py-spy runs at a time: some never start
    pyspy, _ = fake_pyspy(tmp_path, hang=True)
    args = [arg for pid in pids for arg in ("--pid", str(pid))]
    started = time.monotonic()
    done = dump(*args, "--json", "--timeout", "60", "--deadline", "2", pyspy=pyspy)
    took = time.monotonic() - started
    assert done.returncode == 1, done.stderr  # nothing could be read: an error finding
    assert took < 60, took  # 3 rounds x 2 batches x 60 s without a deadline: 360 s
    report = json.loads(done.stdout)
    assert len(report["ranks"]) == 40
    assert {rank["state"] for rank in report["ranks"]} == {"unreadable"}
    details = {rank["detail"] for rank in report["ranks"]}
    assert any("did not answer within" in d for d in details)  # started, cut at the deadline
    assert any("allowed to the whole dump ran out" in d for d in details)  # never started


def run_dir_for(tmp_path: Path, procs, ranks: int = 1) -> tuple[Path, list[int]]:
    """A run directory of `ranks` live processes that run with it (as its ranks do)."""
    root = tmp_path / "run"
    root.mkdir(mode=0o700)
    pids = procs(ranks, root)
    manifest = {
        "status": "running",
        "world_size": ranks,
        "ranks": [{"rank": rank, "pid": pid} for rank, pid in enumerate(pids)],
    }
    (root / "run.json").write_text(json.dumps(manifest))
    for rank in range(ranks):
        (root / "ranks" / str(rank)).mkdir(parents=True)
    return root, pids


RANK_FILES = (
    "proc.json",
    "error.json",
    "exit.json",
    "state.json",
    "events.jsonl",
    "stdout.log",
    "stderr.log",
    "faulthandler.log",
)


def test_fifos_in_the_run_directory_never_hang_a_dump(tmp_path, procs):
    root, pids = run_dir_for(tmp_path, procs, ranks=2)
    for rank in (0, 1):
        for name in RANK_FILES:
            os.mkfifo(root / "ranks" / str(rank) / name)
    pyspy, _ = fake_pyspy(tmp_path)
    done = dump("--run", str(root), "--json", "--samples", "1", pyspy=pyspy, timeout=30)
    assert done.returncode in (0, 1), done.stderr
    assert [rank["pid"] for rank in json.loads(done.stdout)["ranks"]] == pids


def test_a_fifo_in_place_of_run_json_is_no_run_directory(tmp_path, procs):
    root, _ = run_dir_for(tmp_path, procs)
    (root / "run.json").unlink()
    os.mkfifo(root / "run.json")
    pyspy, _ = fake_pyspy(tmp_path)
    done = dump("--run", str(root), pyspy=pyspy, timeout=30)
    assert done.returncode == 3
    assert "no readable run.json" in done.stderr and "Traceback" not in done.stderr


def max_rss_mb(command: list[str], env: dict) -> tuple[float, subprocess.CompletedProcess]:
    """Peak RSS of `command`, measured by a fresh interpreter whose only child it is."""
    probe = (
        "import json, resource, subprocess, sys\n"
        "done = subprocess.run(json.loads(sys.argv[1]), capture_output=True, text=True)\n"
        "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
        "print(json.dumps([peak, done.returncode, done.stdout, done.stderr]))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe, json.dumps(command)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=True,
    ).stdout
    peak_kb, code, stdout, stderr = json.loads(out)
    return peak_kb / 1024, subprocess.CompletedProcess(command, code, stdout, stderr)


def test_sparse_huge_files_in_the_run_directory_cost_little_memory(tmp_path, procs):
    root, _ = run_dir_for(tmp_path, procs, ranks=2)
    for name in ("error.json", "proc.json", "state.json", "stdout.log", "faulthandler.log"):
        with open(root / "ranks" / "0" / name, "wb") as handle:
            os.truncate(handle.fileno(), 2 << 30)  # 2 GB of holes: costs no disk
    (root / "ranks" / "1" / "error.json").write_text(
        json.dumps({"type": "ValueError", "message": "bad shard", "time": 1.0})
    )
    pyspy, _ = fake_pyspy(tmp_path)
    peak, done = max_rss_mb(
        [*MLDEBUG, "dump", "--run", str(root), "--json", "--samples", "1"],
        {**os.environ, "MLDEBUG_PYSPY": pyspy},
    )
    assert done.returncode in (0, 1), done.stderr
    assert len(json.loads(done.stdout)["ranks"]) == 2
    assert peak < 300, f"{peak:.0f} MB"


def test_deeply_nested_json_in_the_run_directory_is_refused_quietly(tmp_path, procs):
    root, pids = run_dir_for(tmp_path, procs, ranks=2)
    deep = "[" * 100_000
    (root / "ranks" / "0" / "error.json").write_text('{"message": ' + deep)
    (root / "ranks" / "0" / "proc.json").write_text(deep + "]" * 100_000)
    (root / "ranks" / "1" / "proc.json").write_text('{"pid": ' + deep)
    pyspy, _ = fake_pyspy(tmp_path)
    done = dump("--run", str(root), "--json", "--samples", "1", pyspy=pyspy)
    assert done.returncode in (0, 1), done.stderr
    assert "Traceback" not in done.stderr
    assert [rank["pid"] for rank in json.loads(done.stdout)["ranks"]] == pids

    (root / "run.json").write_text(deep)
    done = dump("--run", str(root), "--json", pyspy=pyspy)
    assert done.returncode == 3 and "Traceback" not in done.stderr


def test_a_rank_with_many_subprocesses_costs_a_bounded_look_for_its_workers(procs, monkeypatch):
    children = procs(workers.MAX_CHILDREN + 20)  # children of this process, like a rank's
    looked_at = []
    real = workers._cmdline
    monkeypatch.setattr(workers, "_cmdline", lambda proc: looked_at.append(proc) or real(proc))
    workers.worker_candidates(os.getpid())
    assert len(children) > workers.MAX_CHILDREN >= len(looked_at) > 0
