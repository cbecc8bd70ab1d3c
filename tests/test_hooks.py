"""The rank-side hook and agent, in real processes (no torch needed, so these are quick)."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from mldebug.files.procfs import proc_stat
from mldebug.files.rundir import RunPaths, hostname, read_manifest
from mldebug.launch import env as envs
from mldebug.launch.children import Child, poll_children

MLDEBUG = [sys.executable, "-m", "mldebug"]
HOST = hostname()


def script(tmp_path, name, body):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def mldebug_run(tmp_path, *args, env=None, timeout=120):
    run_dir = tmp_path / "run"
    full_env = {**os.environ, "MLDEBUG_RUNS_DIR": str(tmp_path / "runs"), **(env or {})}
    done = subprocess.run(
        [*MLDEBUG, "run", "--run-dir", str(run_dir), *map(str, args)],
        cwd=tmp_path,
        env=full_env,
        capture_output=True,
        timeout=timeout,
    )
    return done, RunPaths(run_dir)


def hooked_python(tmp_path, code, package_dir=None, mode=envs.MODE_NATIVE, extra=None):
    """Run python as a rank would start under mldebug, with the hook on PYTHONPATH."""
    env = {**os.environ, **envs.hook_env(dict(os.environ), tmp_path / "run", mode)}
    env.update({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"})
    if package_dir is not None:
        env[envs.ENV_PACKAGE_DIR] = str(package_dir)
    env.update(extra or {})
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=60)


def test_hook_does_nothing_unless_activated(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(envs.hooks_dir()), "RANK": "0"}
    done = subprocess.run(
        [sys.executable, "-c", "import sys; print('_mldebug_agent' in sys.modules)"],
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert done.stdout == b"False\n" and done.stderr == b""


def test_agent_imports_nothing_heavy(tmp_path):
    done = hooked_python(
        tmp_path,
        "import sys; print(sorted(m for m in ('torch', 'rich', 'textual', 'mldebug') "
        "if m in sys.modules), '_mldebug_agent' in sys.modules)",
    )
    assert done.stdout == b"[] True\n", done.stderr


@pytest.mark.parametrize("broken", ["agent", "run_dir"])
def test_a_failing_hook_stands_aside(tmp_path, broken):
    package_dir, extra = None, {}
    if broken == "agent":
        package_dir = tmp_path / "pkg"
        (package_dir / "agent").mkdir(parents=True)
        (package_dir / "agent" / "__init__.py").write_text("raise RuntimeError('agent bug')\n")
    else:
        (tmp_path / "file").write_text("")
        extra = {envs.ENV_RUN_DIR: str(tmp_path / "file" / "run")}  # cannot be a directory
    done = hooked_python(
        tmp_path,
        "print('user code ran'); raise SystemExit(7)",
        package_dir=package_dir,
        extra=extra,
    )
    assert done.returncode == 7
    assert done.stdout == b"user code ran\n"
    lines = done.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mldebug: hook disabled in this process")
    killed = hooked_python(
        tmp_path,
        "import os, signal; os.kill(os.getpid(), signal.SIGTERM)",
        package_dir=package_dir,
        extra=extra,
    )
    assert killed.returncode == -signal.SIGTERM


def test_existing_sitecustomize_is_chained(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import os\nos.environ['CHAINED'] = 'yes'\n")
    job = script(
        tmp_path,
        "job.py",
        """
        import os, sys
        print("chained:", os.environ.get("CHAINED"), "agent:", "_mldebug_agent" in sys.modules)
    """,
    )
    done, paths = mldebug_run(tmp_path, job, env={"PYTHONPATH": str(site)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode() == f"[{HOST}:0] chained: yes agent: True\n"


def test_exit_code_is_the_scripts_and_named_in_the_report(tmp_path):
    job = script(tmp_path, "job.py", "import sys\nprint('bye')\nsys.exit(7)\n")
    done, paths = mldebug_run(tmp_path, job)
    assert done.returncode == 7
    assert f"rank 0 on {HOST}: exited with code 7" in done.stderr.decode()
    manifest = json.loads(paths.manifest.read_text())
    assert (manifest["status"], manifest["exit_code"]) == ("failed", 7)
    assert manifest["ranks"][0]["exit_code"] == 7


def test_segfault_is_named_with_the_python_stack(tmp_path):
    job = script(
        tmp_path,
        "segv.py",
        """
        import os, signal
        def deep_in_native_code():
            os.kill(os.getpid(), signal.SIGSEGV)
        deep_in_native_code()
    """,
    )
    done, paths = mldebug_run(tmp_path, job)
    assert done.returncode == 128 + signal.SIGSEGV
    report = done.stderr.decode()
    assert "rank 0 on" in report and "segmentation fault (SIGSEGV)" in report
    assert 'segv.py", line 4 in deep_in_native_code' in report


def test_wrapped_launcher_output_and_rank_children(tmp_path):
    """A toy launcher starts rank 0, which starts a helper process with the same rank env."""
    launcher = script(
        tmp_path,
        "launcher.py",
        """
        import os, subprocess, sys
        print("launcher starting", flush=True)
        env = {**os.environ, "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"}
        sys.exit(subprocess.call([sys.executable, "rank.py"], env=env))
    """,
    )
    script(
        tmp_path,
        "rank.py",
        """
        import os, subprocess, sys
        print("rank pid", os.getpid())
        subprocess.check_call([sys.executable, "-c", "print('helper of rank 0')"])
        sys.exit(3)
    """,
    )
    done, paths = mldebug_run(tmp_path, "--", sys.executable, launcher)
    assert done.returncode == 3
    out = done.stdout.decode().splitlines()
    assert f"[{HOST}:launcher] launcher starting" in out
    assert f"[{HOST}:0] helper of rank 0" in out
    info = json.loads(paths.proc_info(0).read_text())
    assert f"[{HOST}:0] rank pid {info['pid']}" in out  # the helper did not take over rank 0
    assert b"helper of rank 0" in paths.stdout(0).read_bytes()
    manifest = json.loads(paths.manifest.read_text())
    assert manifest["mode"] == "wrap" and manifest["exit_code"] == 3
    assert manifest["ranks"][0]["pid"] == info["pid"]


def test_module_mode_gets_torchrun_environment(tmp_path):
    (tmp_path / "whoami.py").write_text(
        "import os\n"
        "print('rank', os.environ['RANK'], 'local', os.environ['LOCAL_RANK'], 'of',"
        " os.environ['WORLD_SIZE'], os.environ['MASTER_ADDR'], os.environ['TORCHELASTIC_RUN_ID'])\n"
    )
    done, paths = mldebug_run(tmp_path, "--nproc-per-node", "2", "-m", "whoami")
    assert done.returncode == 0, done.stderr
    run_id = paths.root.name
    assert sorted(done.stdout.decode().splitlines()) == [
        f"[{HOST}:0] rank 0 local 0 of 2 127.0.0.1 {run_id}",
        f"[{HOST}:1] rank 1 local 1 of 2 127.0.0.1 {run_id}",
    ]


PEERS = """
        import json, os, signal, time
        rank = int(os.environ["RANK"])
        proc = os.path.join(os.environ["MLDEBUG_RUN_DIR"], "ranks", "{}", "proc.json")
        while not os.path.exists(proc.format(1 - rank)):
            time.sleep(0.01)
        if rank == 1:
            time.sleep(0.5)
            os.kill(os.getpid(), signal.SIGKILL)
        peer = json.load(open(proc.format(1)))["pid"]
        while os.path.exists(f"/proc/{peer}") and open(f"/proc/{peer}/stat").read().split()[2] != "Z":
            time.sleep(0.001)
        raise ConnectionError("peer closed the connection")
"""


def test_a_killed_rank_is_the_root_cause_not_the_peer_that_noticed(tmp_path):
    """Rank 1 is SIGKILLed (as by the OOM killer); rank 0 raises the moment it notices.

    Rank 0's exception is written before mldebug sees rank 1's exit, yet rank 1 is the cause.
    """
    job = script(tmp_path, "peers.py", PEERS)
    done, paths = mldebug_run(tmp_path, "--nproc-per-node", "2", job)
    report = done.stderr.decode()
    assert f"root cause (first failure): rank 1 on {HOST}: killed (SIGKILL): OOM killer?" in report
    assert "then rank 0" in report and "ConnectionError: peer closed the connection" in report
    assert done.returncode == 128 + signal.SIGKILL


def test_a_rank_stopped_while_it_ends_after_its_own_exception_is_failed_not_interrupted(
    tmp_path,
):
    """Rank 1 raises, then takes long to end (a slow teardown); rank 0 exits a moment
    later, having noticed. mldebug ends the job and stops rank 1 on its way out: its status
    in run.json is still that it failed, since it raised before it was stopped."""
    job = script(
        tmp_path,
        "teardown.py",
        """
        import atexit, os, sys, time
        rank = int(os.environ["RANK"])
        if rank == 1:
            atexit.register(time.sleep, 60)  # a teardown slower than the job's end
            raise ValueError("rank 1 gives up")
        time.sleep(2)  # rank 0 notices its peer is gone
        sys.exit(3)
    """,
    )
    done, paths = mldebug_run(tmp_path, "--nproc-per-node", "2", job)
    report = done.stderr.decode()
    assert f"root cause (first failure): rank 1 on {HOST}: ValueError: rank 1 gives up" in report
    ranks = {entry["rank"]: entry for entry in read_manifest(paths.root)["ranks"]}
    assert ranks[1]["status"] == "failed", ranks
    assert ranks[0]["status"] == "failed", ranks


def test_wrapped_rank_that_dies_abruptly_is_the_root_cause(tmp_path):
    """The same under a launcher: mldebug sees no exit status, only that rank 1 vanished
    without an error file or a normal exit."""
    script(tmp_path, "peers.py", PEERS)
    launcher = script(
        tmp_path,
        "launcher.py",
        """
        import os, subprocess, sys
        ranks = [
            subprocess.Popen([sys.executable, "peers.py"],
                             env={**os.environ, "RANK": str(r), "WORLD_SIZE": "2"})
            for r in (0, 1)
        ]
        sys.exit(1 if any(rank.wait() for rank in ranks) else 0)
    """,
    )
    done, paths = mldebug_run(tmp_path, "--", sys.executable, launcher)
    report = done.stderr.decode()
    assert done.returncode == 1  # the launcher's
    assert (
        f"root cause (first failure): rank 1 on {HOST}: ended without a Python exception "
        "or a normal exit"
    ) in report
    assert "then rank 0" in report and "ConnectionError" in report
    manifest = json.loads(paths.manifest.read_text())
    assert manifest["first_failure"]["rank"] == 1
    assert {r["rank"]: r["status"] for r in manifest["ranks"]} == {0: "failed", 1: "failed"}
    assert paths.exit_file(0).exists() and not paths.exit_file(1).exists()


def test_a_process_forked_from_a_rank_does_not_speak_for_it(tmp_path):
    """A forked child inherits the excepthook and atexit: its error and its normal exit are
    its own, not the rank's (the rank here ends fine, so the job does too)."""
    job = script(
        tmp_path,
        "fork.py",
        """
        import os, sys
        exit_file = os.path.join(os.environ["MLDEBUG_RUN_DIR"], "ranks", "0", "exit.json")
        pid = os.fork()
        if pid == 0:
            raise RuntimeError("a forked helper failed")
        os.waitpid(pid, 0)
        print("exit file after the child:", os.path.exists(exit_file))
    """,
    )
    done, paths = mldebug_run(tmp_path, job)
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode() == f"[{HOST}:0] exit file after the child: False\n"
    assert "root cause" not in done.stderr.decode()
    assert not paths.error_file(0).exists()
    info = json.loads(paths.proc_info(0).read_text())
    assert json.loads(paths.exit_file(0).read_text())["pid"] == info["pid"]


def test_an_exception_logged_through_the_excepthook_is_not_a_failure(tmp_path):
    """Code may pass a caught exception to sys.excepthook to log it and carry on: a rank
    that then exits with 0 did not fail, and the job's exit code stays the script's."""
    job = script(
        tmp_path,
        "logs.py",
        """
        import sys
        try:
            1 / 0
        except ZeroDivisionError:
            sys.excepthook(*sys.exc_info())
        print("carried on")
    """,
    )
    done, paths = mldebug_run(tmp_path, job)
    assert done.returncode == 0, done.stderr
    assert "ZeroDivisionError" in done.stderr.decode()  # the user's hook still printed it
    assert "root cause" not in done.stderr.decode()
    manifest = json.loads(paths.manifest.read_text())
    assert (manifest["status"], manifest["first_failure"]) == ("succeeded", None)


def test_a_run_json_that_cannot_be_written_does_not_end_the_job(tmp_path):
    """run.json is there for other commands: when it cannot be rewritten (a full disk, a
    quota), the job runs on, the report is printed and the exit code is the script's."""
    job = script(
        tmp_path,
        "quota.py",
        """
        import json, os, sys, time
        run_dir, rank = os.environ["MLDEBUG_RUN_DIR"], int(os.environ["RANK"])
        if rank == 1:
            # A directory in place of run.json: renaming the new one onto it fails.
            manifest = os.path.join(run_dir, "run.json")
            os.replace(manifest, manifest + ".old")
            os.mkdir(manifest)
            sys.exit(0)
        proc = os.path.join(run_dir, "ranks", "1", "proc.json")
        while not os.path.exists(proc):
            time.sleep(0.01)
        peer = json.load(open(proc))["pid"]
        while os.path.exists(f"/proc/{peer}"):  # until mldebug has seen rank 1 end
            time.sleep(0.01)
        time.sleep(1)
        print("rank 0 finished its work")
        sys.exit(4)
    """,
    )
    done, paths = mldebug_run(tmp_path, "--nproc-per-node", "2", job)
    err = done.stderr.decode()
    assert done.returncode == 4, err
    assert done.stdout.decode() == f"[{HOST}:0] rank 0 finished its work\n"
    assert f"root cause (first failure): rank 0 on {HOST}: exited with code 4" in err
    assert f"mldebug: could not keep {paths.manifest} up to date" in err
    assert "Traceback" not in err


def test_ranks_end_when_mldebug_run_itself_is_killed(tmp_path):
    """SIGKILL gives `mldebug run` no chance to stop the job: the ranks, each in a session
    of its own, must still not run on without it."""
    from mldebug.files.procfs import pid_alive

    job = script(tmp_path, "forever.py", "import time\nwhile True:\n    time.sleep(1)\n")
    paths = RunPaths(tmp_path / "run")
    proc = subprocess.Popen(
        [*MLDEBUG, "run", "--run-dir", str(paths.root), "--nproc-per-node", "2", str(job)],
        env={**os.environ, "MLDEBUG_RUNS_DIR": str(tmp_path / "runs")},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    pids = []
    try:
        deadline = time.monotonic() + 60
        while len(pids) < 2:
            assert time.monotonic() < deadline, "the ranks never started"
            time.sleep(0.05)
            pids = [
                json.loads(paths.proc_info(r).read_text())["pid"]
                for r in (0, 1)
                if paths.proc_info(r).exists()
            ]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 30
        while any(pid_alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(pid_alive(pid) for pid in pids), "ranks outlived mldebug run"
    finally:
        for pid in pids:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_launcher_started_with_interpreter_options_is_not_taken_for_a_rank(tmp_path):
    """`srun python -W ignore torchrun ...`: the launcher has SLURM_PROCID=0 but is no rank;
    taking it for rank 0 would leave the real rank 0 without its agent."""
    launcher = script(
        tmp_path,
        "torchrun",
        """
        import os, subprocess, sys
        ranks = [subprocess.Popen([sys.executable, "rank.py"],
                                  env={**os.environ, "RANK": str(r), "WORLD_SIZE": "2"})
                 for r in (0, 1)]
        sys.exit(max(rank.wait() for rank in ranks))
    """,
    )
    script(
        tmp_path, "rank.py", "import os\nprint('rank', os.environ['RANK'], 'pid', os.getpid())\n"
    )
    done, paths = mldebug_run(
        tmp_path,
        "--",
        sys.executable,
        "-W",
        "ignore",
        launcher,
        env={"SLURM_PROCID": "0", "SLURM_NTASKS": "1"},
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout.decode().splitlines()
    for rank in (0, 1):
        pid = json.loads(paths.proc_info(rank).read_text())["pid"]
        assert f"[{HOST}:{rank}] rank {rank} pid {pid}" in out


def test_a_rank_whose_main_thread_has_died_is_not_seen_alive_while_its_threads_end():
    """Killed with threads running, a rank's main thread is a zombie before waitpid can reap
    the process: its peers already see it gone, so mldebug must not count it alive then.
    (pthread_exit on the main thread leaves the same state, and holds it.)"""
    dying = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import ctypes, threading, time\n"
            "threading.Thread(target=time.sleep, args=(30,)).start()\n"
            "ctypes.CDLL(None).pthread_exit(None)\n",
        ]
    )
    try:
        child = Child(rank=1, popen=dying, last_alive=0.0)
        deadline = time.monotonic() + 30
        while proc_stat(dying.pid)[0] != "Z" and time.monotonic() < deadline:
            time.sleep(0.01)
        poll_children([child], lambda c: None)
        assert dying.returncode is None  # waitpid cannot reap it yet
        assert child.last_alive == 0.0
    finally:
        dying.kill()
        dying.wait()
