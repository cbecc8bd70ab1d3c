"""`mldebug run` on real 2-rank gloo jobs: prefixes, root cause, exit codes, cleanup.

Three jobs, each started once per module and shared by the tests that read them:
  * a native job whose ranks write concurrently and in pieces, then rank 1 raises;
  * the same script wrapped: `mldebug run -- torchrun ...`;
  * a job with DataLoader workers that is stopped with SIGTERM.
"""

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from mldebug.files.procfs import pid_alive
from mldebug.files.rundir import RunPaths, hostname

pytestmark = pytest.mark.multirank

MLDEBUG = [sys.executable, "-m", "mldebug"]
TORCHRUN = str(Path(sys.executable).parent / "torchrun")
HOST = hostname()
LINES = 40

NOISY_JOB = f"""\
import logging, os, sys
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
dist.barrier()
for i in range({LINES}):
    for piece in (f"rank{{rank}} line {{i}} ", "in ", "pieces\\n"):
        sys.stdout.write(piece)
        sys.stdout.flush()
    os.write(2, f"rank{{rank}} c-level {{i}} ".encode())
    os.write(2, b"write\\n")
for i in range(30):
    sys.stderr.write(f"\\rrank{{rank}} progress {{i}}/29")
    sys.stderr.flush()
sys.stderr.write("\\n")
os.write(1, b"not utf-8: \\xff\\xfe rank" + str(rank).encode() + b"\\n")
logging.warning("rank%d logged", rank)
dist.barrier()
if rank == 1:
    raise ValueError("rank 1 gives up")
dist.barrier()
"""
RAISE_LINE = NOISY_JOB.splitlines().index('    raise ValueError("rank 1 gives up")') + 1

DATALOADER_JOB = """\
import os, sys, time
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset

class Slow(Dataset):
    def __len__(self):
        return 10**9
    def __getitem__(self, index):
        time.sleep(0.05)
        return torch.zeros(1)

dist.init_process_group("gloo")
loader = iter(DataLoader(Slow(), num_workers=2, batch_size=1))
next(loader)
pids = [w.pid for w in loader._workers]
print("ready", " ".join(map(str, pids)), flush=True)
while True:
    next(loader)
"""


def start(tmp_path, *args, **kwargs):
    env = {**os.environ, "MLDEBUG_RUNS_DIR": str(tmp_path / "runs")}
    return subprocess.Popen(
        [*MLDEBUG, "run", "--run-dir", str(tmp_path / "run"), *map(str, args)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        **kwargs,
    )


def finish(proc, timeout=240):
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, out.decode("utf-8"), err.decode("utf-8")


def run_noisy(tmp_path_factory, wrapped):
    tmp_path = tmp_path_factory.mktemp("wrapped" if wrapped else "native")
    (tmp_path / "job.py").write_text(NOISY_JOB)
    if wrapped:
        proc = start(tmp_path, "--", TORCHRUN, "--standalone", "--nproc-per-node", "2", "job.py")
    else:
        proc = start(tmp_path, "--nproc-per-node", "2", "job.py")
    code, out, err = finish(proc)
    return code, out, err, RunPaths(tmp_path / "run"), tmp_path


@pytest.fixture(scope="module")
def native_job(tmp_path_factory):
    return run_noisy(tmp_path_factory, wrapped=False)


@pytest.fixture(scope="module")
def wrapped_job(tmp_path_factory):
    return run_noisy(tmp_path_factory, wrapped=True)


def check_console_lines(out, err):
    """Every line is prefixed with its own rank's prefix and whole."""
    pieces = re.compile(rf"^\[{HOST}:(\d)\] rank(\d) line (\d+) in pieces$")
    c_level = re.compile(rf"^\[{HOST}:(\d)\] rank(\d) c-level (\d+) write$")
    seen = {pattern: {0: [], 1: []} for pattern in (pieces, c_level)}
    for stream, pattern in ((out, pieces), (err, c_level)):
        for line in stream.splitlines():
            match = pattern.match(line)
            if match:
                assert match[1] == match[2], line  # the prefix names the rank that wrote it
                seen[pattern][int(match[1])].append(int(match[3]))
            elif "line" in line and "pieces" in line or "c-level" in line:
                pytest.fail(f"broken or unprefixed line: {line!r}")
    for pattern in seen:
        assert seen[pattern] == {0: list(range(LINES)), 1: list(range(LINES))}
    for rank in (0, 1):
        assert f"[{HOST}:{rank}] not utf-8: \ufffd\ufffd rank{rank}" in out
        assert f"[{HOST}:{rank}] rank{rank} progress 29/29" in err
        assert f"[{HOST}:{rank}] WARNING:root:rank{rank} logged" in err
        progress = [line for line in err.splitlines() if f"rank{rank} progress" in line]
        assert len(progress) < 10, progress  # refreshes are throttled, not all 30 shown


def check_root_cause(err, paths, tmp_path):
    report = err[err.index("mldebug: root cause") :]
    assert report.startswith(
        f"mldebug: root cause (first failure): rank 1 on {HOST}: ValueError: rank 1 gives up"
    )
    assert f"raised at {tmp_path / 'job.py'}:{RAISE_LINE}" in report
    assert "mldebug recipes rank-crash" in report
    manifest = json.loads(paths.manifest.read_text())
    assert manifest["status"] == "failed"
    assert manifest["first_failure"]["rank"] == 1
    assert manifest["first_failure"]["location"].endswith(f"job.py:{RAISE_LINE}")
    return manifest


def test_native_console_lines_are_prefixed_and_whole(native_job):
    code, out, err, paths, _ = native_job
    check_console_lines(out, err)


def test_native_raw_bytes_are_kept(native_job):
    code, out, err, paths, _ = native_job
    raw = paths.stdout(1).read_bytes()
    assert b"not utf-8: \xff\xfe rank1\n" in raw
    assert paths.stdout(1).read_bytes().count(b" in pieces\n") == LINES
    assert b"\rrank1 progress 5/29\r" in paths.stderr(1).read_bytes()


@pytest.mark.compat  # .ci/compat: the crash report
def test_native_crash_names_root_cause_and_ends_the_job(native_job):
    code, out, err, paths, tmp_path = native_job
    assert code == 1
    manifest = check_root_cause(err, paths, tmp_path)
    assert manifest["exit_code"] == 1 and manifest["mode"] == "native"
    assert [r["rank"] for r in manifest["ranks"]] == [0, 1]
    assert manifest["ranks"][1]["status"] == "failed"
    assert not any(pid_alive(r["pid"]) for r in manifest["ranks"])


@pytest.mark.compat
def test_dump_of_the_crashed_run_names_the_root_cause(native_job):
    # GIVEN the run that ended with rank 1's exception, WHEN dump reads it post-mortem
    code, out, err, paths, tmp_path = native_job
    done = subprocess.run(
        [*MLDEBUG, "dump", "--run", str(paths.root), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    # THEN its verdict is the first failure, with the raising line and the recipe
    assert done.returncode == 1, done.stderr
    crash = json.loads(done.stdout)["findings"][0]
    assert crash["kind"] == "crash" and crash["ranks"] == [1]
    assert crash["location"] == f"{tmp_path / 'job.py'}:{RAISE_LINE}"
    assert "ValueError: rank 1 gives up" in crash["summary"]
    assert crash["recipe"] == "rank-crash"


def test_wrapped_torchrun_prefixes_report_and_exit_code(wrapped_job):
    code, out, err, paths, tmp_path = wrapped_job
    assert code == 1  # torchrun's own exit code
    check_console_lines(out, err)
    assert f"[{HOST}:launcher] " in out
    assert b"ChildFailedError" in paths.launcher_log.read_bytes()  # torchrun's own report
    manifest = check_root_cause(err, paths, tmp_path)
    assert manifest["mode"] == "wrap" and manifest["world_size"] == 2
    assert {r["rank"] for r in manifest["ranks"]} == {0, 1}
    assert not any(pid_alive(r["pid"]) for r in manifest["ranks"])


def test_sigterm_stops_every_rank_and_dataloader_worker(tmp_path):
    (tmp_path / "loader.py").write_text(textwrap.dedent(DATALOADER_JOB))
    proc = start(tmp_path, "--nproc-per-node", "2", "--grace-period", "3", "loader.py")
    paths = RunPaths(tmp_path / "run")
    workers: dict[int, list[int]] = {}
    deadline = time.monotonic() + 240
    try:
        while len(workers) < 2:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the job never got ready"
            for rank in (0, 1):
                if paths.stdout(rank).is_file():
                    for line in paths.stdout(rank).read_text().splitlines():
                        if line.startswith("ready "):
                            workers[rank] = [int(p) for p in line.split()[1:]]
            time.sleep(0.5)
        manifest = json.loads(paths.manifest.read_text())
        rank_pids = [r["pid"] for r in manifest["ranks"]]
        assert all(pid_alive(pid) for pid in rank_pids + workers[0] + workers[1])
        proc.send_signal(signal.SIGTERM)
    finally:
        code, out, err = finish(proc, timeout=120)
    assert code == 128 + signal.SIGTERM
    assert "job stopped" in err
    left = [pid for pid in rank_pids + workers[0] + workers[1] if pid_alive(pid)]
    assert left == []
    manifest = json.loads(paths.manifest.read_text())
    assert manifest["status"] == "interrupted"
    assert {r["status"] for r in manifest["ranks"]} == {"interrupted"}
