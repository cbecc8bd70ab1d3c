"""A full disk harms nothing: the ranks run to their own exit codes, their output reaches the
console, and mldebug says once that the run directory's filesystem is full and where each
log ends. On a real tmpfs of 512 KiB (root can mount one; elsewhere these are skipped)."""

import errno
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from mldebug.files.rundir import RunPaths, hostname
from mldebug.launch import env as envs

MLDEBUG = [sys.executable, "-m", "mldebug"]
HOST = hostname()
FULL = "mldebug: the run directory's filesystem is full (No space left on device)"


@pytest.fixture
def tmpfs(tmp_path):
    """A 512 KiB tmpfs, empty."""
    mount = tmp_path / "fs"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(directory):
    """Fill the filesystem of `directory` to the last byte."""
    fd = os.open(directory / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as error:
        assert error.errno == errno.ENOSPC
    finally:
        os.close(fd)


# Each rank writes more than the disk holds, waits for the other (through a directory
# outside the tmpfs), then writes a line to each stream and exits with its own code (rank 1
# last: its failure stops the job).
FLOOD = """
    import os, sys, time
    rank = int(os.environ["RANK"])
    meet = os.environ["MEET"]
    for i in range(300):
        print(f"rank {rank} line {i} " + "x" * 1000, flush=True)
    open(os.path.join(meet, str(rank)), "w").close()
    while not all(os.path.exists(os.path.join(meet, r)) for r in "01"):
        time.sleep(0.05)
    print(f"rank {rank} after the disk filled", flush=True)
    print(f"rank {rank} on stderr too", file=sys.stderr, flush=True)
    if rank == 0:
        open(os.path.join(meet, "0-done"), "w").close()
        sys.exit(0)
    while not os.path.exists(os.path.join(meet, "0-done")):  # rank 1's exit stops the job
        time.sleep(0.05)
    sys.exit(3)
"""


def expected_stdout(rank):
    lines = [f"rank {rank} line {i} " + "x" * 1000 for i in range(300)]
    return "".join(f"{line}\n" for line in lines + [f"rank {rank} after the disk filled"])


def run(tmp_path, run_dir, *args):
    meet = tmp_path / "meet"
    meet.mkdir()
    (tmp_path / "flood.py").write_text(textwrap.dedent(FLOOD))
    done = subprocess.run(
        [*MLDEBUG, "run", "--run-dir", str(run_dir), *map(str, args)],
        cwd=tmp_path,
        env={**os.environ, "MLDEBUG_RUNS_DIR": str(tmp_path / "runs"), "MEET": str(meet)},
        capture_output=True,
        timeout=240,
    )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def ends_said(err):
    """name -> byte, from the one message that says where the logs end."""
    line = next(line for line in err.splitlines() if "the logs end where they are now" in line)
    return {name: int(n) for name, n in re.findall(r"(\S+\.log) at byte (\d+)", line)}


def test_ranks_outlive_a_disk_that_fills_up_and_their_output_still_shows(tmp_path, tmpfs):
    paths = RunPaths(tmpfs / "run")
    code, out, err = run(tmp_path, paths.root, "--nproc-per-node", "2", "flood.py")
    # THEN the job ends with its own exit code, its later lines reach the console
    assert code == 3, err
    for rank in (0, 1):
        assert f"[{HOST}:{rank}] rank {rank} after the disk filled" in out.splitlines()
        assert f"[{HOST}:{rank}] rank {rank} on stderr too" in err.splitlines()
        shown = [line for line in out.splitlines() if line.startswith(f"[{HOST}:{rank}] rank")]
        assert len(shown) == 301
    # AND mldebug said once that the filesystem is full, naming where each log ends
    assert err.count(FULL) == 1, err
    ends = ends_said(err)
    assert set(ends) == {f"ranks/{r}/{s}.log" for r in (0, 1) for s in ("stdout", "stderr")}
    manifest = json.loads(paths.manifest.read_text())
    assert (manifest["status"], manifest["exit_code"]) == ("failed", 3)
    state = manifest["logs_incomplete"]
    assert state["reason"] == "No space left on device"
    assert state["missing_from"], state  # at least one log lost output...
    for name, offset in state["missing_from"].items():
        data = (paths.root / name).read_bytes()
        assert len(data) == offset  # ...from exactly the byte it says
        rank, stream = int(name.split("/")[1]), name.rsplit("/", 1)[1]
        if stream == "stdout.log":
            assert expected_stdout(rank).encode().startswith(data)  # and no gap before it
    assert "its logs are incomplete (No space left on device)" in err  # the report says it
    assert "Traceback" not in err
    assert not (paths.root / ".run.json.reserve").exists()


def test_a_run_directory_on_a_full_filesystem(tmp_path, tmpfs):
    fill(tmpfs)
    code, out, err = run(tmp_path, tmpfs / "run", "--nproc-per-node", "2", "flood.py")
    assert code == 3, err
    for rank in (0, 1):
        shown = [line for line in out.splitlines() if line.startswith(f"[{HOST}:{rank}] rank")]
        assert len(shown) == 301
    assert err.count(FULL) == 1, err
    assert "no log can be written" in err
    assert "root cause (first failure): rank 1" in err
    assert "Traceback" not in err and "hook disabled" not in err


LAUNCHER = """
    import os, subprocess, sys
    print("launcher starting", flush=True)
    ranks = [
        subprocess.Popen([sys.executable, "flood.py"],
                         env={**os.environ, "RANK": str(r), "WORLD_SIZE": "2"})
        for r in (0, 1)
    ]
    codes = [rank.wait() for rank in ranks]
    print("launcher saw", codes, flush=True)
    sys.exit(max(codes))
"""


def test_wrapped_ranks_outlive_a_disk_that_fills_up(tmp_path, tmpfs):
    """Wrapped ranks write their own logs: when those fill the disk, their output goes on
    through the launcher's (as [launcher] lines) and they end as they would have."""
    (tmp_path / "launcher.py").write_text(textwrap.dedent(LAUNCHER))
    code, out, err = run(tmp_path, tmpfs / "run", "--", sys.executable, "launcher.py")
    assert code == 3, err
    assert f"[{HOST}:launcher] launcher saw [0, 3]" in out.splitlines()
    for rank in (0, 1):
        assert re.search(
            rf"^\[{HOST}:(launcher|{rank})\] rank {rank} after the disk filled$", out, re.M
        )
    assert err.count(FULL) == 1, err
    manifest = json.loads((tmpfs / "run" / "run.json").read_text())
    assert manifest["status"] == "failed" and manifest["exit_code"] == 3
    assert "launcher.log" in manifest["logs_incomplete"]["stopped_at"]


def test_the_agent_writes_nothing_into_a_program_on_a_full_disk(tmp_path, tmpfs):
    """A wrapped rank whose run directory is full from the start: no proc.json, error.json,
    faulthandler log; the program's output, exception and exit code are its own."""
    run_dir = tmpfs / "run"
    (run_dir / "ranks").mkdir(parents=True)
    fill(tmpfs)
    env = {**os.environ, **envs.hook_env(dict(os.environ), run_dir, envs.MODE_WRAP)}
    env.update({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"})
    code = "print('hello', flush=True); import atexit; raise KeyError('mine')"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=60)
    assert done.returncode == 1
    assert done.stdout == b"hello\n"
    assert done.stderr.decode().strip().splitlines()[-1] == "KeyError: 'mine'"
    assert "mldebug" not in done.stderr.decode()


def test_a_file_size_limit_ends_the_logs_not_the_ranks(tmp_path):
    """Under `ulimit -f` a rank writing to its log would die of SIGXFSZ; through mldebug's
    pipes it runs on, and mldebug says where each log stops."""
    import resource

    limit = 64 << 10

    def limited():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    (tmp_path / "big.py").write_text(
        "import sys\nfor i in range(300): print(f'line {i} ' + 'z' * 1000)\n"
        "print('the last line', flush=True)\nsys.exit(5)\n"
    )
    done = subprocess.run(
        [*MLDEBUG, "run", "--run-dir", str(tmp_path / "run"), "big.py"],
        cwd=tmp_path,
        env={**os.environ, "MLDEBUG_RUNS_DIR": str(tmp_path / "runs")},
        capture_output=True,
        timeout=120,
        preexec_fn=limited,
    )
    out, err = done.stdout.decode(), done.stderr.decode()
    assert done.returncode == 5, err
    assert f"[{HOST}:0] the last line" in out.splitlines()
    stdout_log = tmp_path / "run" / "ranks" / "0" / "stdout.log"
    said = f"mldebug: cannot write {stdout_log} (File too large); mldebug writes no more to it"
    assert err.count(said) == 1, err
    assert f"after byte {stdout_log.stat().st_size};" in err
    assert stdout_log.stat().st_size <= limit
