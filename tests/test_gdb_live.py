"""`mldebug dump --native-all` on a real job: 2 gloo ranks under `mldebug run`, hung in
their collectives (rank 0 in all_reduce, rank 1 in a recv nobody sends), read with the real
gdb. Every rank's gloo threads, which run no Python, must come out with their native
frames; and with no gdb on PATH, one line and exit 5. Last, both ranks are sent SIGABRT
(as NCCL's watchdog aborts hung ranks) and `mldebug dump --core` must reach the same
cross-rank verdict from their two core files as from the live ranks.

The job starts once per module (importing torch in 2 ranks takes a while).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from testkit.jobs import start, stop, wait_ready

from mldebug.collect.cores import core_plan, find_core

JOBS = Path(__file__).parent / "jobs"
MLDEBUG = [sys.executable, "-m", "mldebug"]
pytestmark = [
    pytest.mark.multirank,
    pytest.mark.timeout(600),
    pytest.mark.skipif(shutil.which("gdb") is None, reason="needs gdb (.ci/run installs it)"),
]


STARTED: dict = {}  # run directory -> the `mldebug run` process


@pytest.fixture(scope="module")
def hung(tmp_path_factory):
    folder = tmp_path_factory.mktemp("native_hang")
    proc, run_dir = start(
        folder,
        JOBS / "native_jobs.py",
        2,
        args=("hang",),
        options=("--core-dumps",),
        env={"CORE_DIRS": "1"},
    )
    try:
        wait_ready(proc, run_dir, 2)
        STARTED[run_dir] = proc
        yield run_dir
    finally:
        stop(proc)


@pytest.fixture(scope="module")
def native_report(hung):
    done = subprocess.run(
        [*MLDEBUG, "dump", "--run", str(hung), "--native-all", "--json"],
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)


def test_every_rank_shows_its_gloo_threads_with_native_frames(native_report):
    ranks = {entry["rank"]: entry for entry in native_report["native"]["ranks"]}
    assert sorted(ranks) == [0, 1]
    for rank, entry in ranks.items():
        assert entry["failure"] is None, entry
        gloo = [t for t in entry["threads"] if t["name"] == "pt_gloo_runloop"]
        assert gloo, (rank, [t["name"] for t in entry["threads"]])
        for thread in gloo:
            assert not thread["python"] and thread["python_frames"] == []
            assert any("ProcessGroupGloo::runLoop" in f["function"] for f in thread["frames"])
            assert all(f["native"] for f in thread["frames"])
        assert any(t["name"] == "gloo_tcp_loop" for t in entry["threads"])


def test_python_threads_are_lined_up_with_py_spy_by_thread_id(native_report):
    for entry in native_report["native"]["ranks"]:
        named = {t["python_name"]: t for t in entry["threads"] if t["python_name"]}
        assert {"MainThread", "mldebug-heartbeat"} <= set(named), entry["rank"]
        main = named["MainThread"]
        assert main["lwp"] == entry["pid"]
        op = "all_reduce" if entry["rank"] == 0 else "recv"
        assert any(f["function"] == op for f in main["python_frames"])


def test_the_findings_speak_of_the_thread_without_python(native_report):
    native = [f for f in native_report["findings"] if f["kind"] == "native_threads"]
    ring = next(f for f in native if "waitRecv" in f["summary"])
    assert ring["ranks"] == [0] and "pt_gloo_runloop" in ring["summary"]
    assert ring["recipe"] == "collective-hang"
    assert native_report["findings"][0]["kind"] == "mismatch"  # the verdict stays the first


def test_without_gdb_one_line_and_exit_5(hung, tmp_path):
    bare = tmp_path / "bin"
    bare.mkdir()
    done = subprocess.run(
        [*MLDEBUG, "dump", "--run", str(hung), "--native-all"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PATH": str(bare)},
    )
    assert done.returncode == 5, done.stderr
    assert "gdb is not installed" in done.stderr and "apt-get install gdb" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""


def test_last_cores_of_both_ranks_give_the_same_verdict_as_the_live_ranks(hung):
    plan = core_plan()
    if plan.piped:
        pytest.skip(f"kernel.core_pattern is a pipe here: {plan.explain()}")
    manifest = json.loads((hung / "run.json").read_text())
    pids = {entry["rank"]: entry["pid"] for entry in manifest["ranks"]}
    since = time.time() - 1
    for pid in pids.values():
        os.kill(pid, signal.SIGABRT)
    STARTED[hung].wait(timeout=120)
    folder = hung.parent
    cores = [
        find_core(plan, pids[rank], str(folder / f"cores-rank{rank}"), since) for rank in (0, 1)
    ]
    assert all(cores), (plan, sorted(p.name for p in folder.iterdir()))
    done = subprocess.run(
        [*MLDEBUG, "dump", "--core", *map(str, cores), "--json"],
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    kinds = [f["kind"] for f in report["findings"]]
    assert kinds[0] == "mismatch", report["findings"]  # the verdict, as on the live ranks
    crashed = [r for f in report["findings"] if f["kind"] == "native_crash" for r in f["ranks"]]
    assert sorted(crashed) == [0, 1]
    mismatch = next(f for f in report["findings"] if f["kind"] == "mismatch")
    assert sorted(p["label"] for p in mismatch["parts"]) == ["all_reduce", "recv"]
    ranks = {entry["rank"]: entry for entry in report["native"]["ranks"]}
    assert sorted(ranks) == [0, 1] and {e["signal"] for e in ranks.values()} == {"SIGABRT"}
    for entry in ranks.values():
        assert any(t["name"] == "" and not t["python"] for t in entry["threads"])  # gloo's
