"""`mldebug run -- LAUNCHER` signals only rank processes it can verify as its own.

A wrapped launcher's ranks are known from the proc.json their hook writes; at the end,
ranks the launcher left running are ended. A proc.json is only a claim: the processes below
are named by one and must never get a signal (plain-Python processes, no torch).
"""

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

from mldebug.files.procfs import proc_start_ticks
from mldebug.files.rundir import RunPaths, hostname

MLDEBUG = [sys.executable, "-m", "mldebug"]

# Records every SIGTERM it gets, and does not die of it (SIGKILL would show as death).
STRANGER = textwrap.dedent(
    """
    import os, signal, sys, time
    log = sys.argv[1]
    def note(signum, frame):
        with open(log, "a") as handle:
            handle.write(f"{signum}\\n")
    signal.signal(signal.SIGTERM, note)
    print("up", flush=True)
    while True:
        time.sleep(0.1)
    """
)

LAUNCHER = textwrap.dedent(
    """
    import json, os, subprocess, sys, time
    run = os.environ["MLDEBUG_RUN_DIR"]
    stranger, log = sys.argv[1], sys.argv[2]

    # A process the launcher starts outside the job: no MLDEBUG_RUN_DIR, its own session.
    env = {k: v for k, v in os.environ.items() if k not in ("MLDEBUG_RUN_DIR", "PYTHONPATH")}
    helper = subprocess.Popen(
        [sys.executable, stranger, log], env=env, start_new_session=True,
        stdout=subprocess.PIPE, text=True,
    )
    helper.stdout.readline()
    os.makedirs(os.path.join(run, "ranks", "6"))
    with open(os.path.join(run, "ranks", "6", "proc.json"), "w") as handle:
        json.dump({"rank": 6, "pid": helper.pid, "host": sys.argv[3]}, handle)
    with open(os.path.join(run, "helper.pid"), "w") as handle:
        handle.write(str(helper.pid))

    # Rank 0, in a session of its own, left running when the launcher exits.
    rank = {**os.environ, "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"}
    subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(300)"], env=rank,
        start_new_session=True,
    )
    proc = os.path.join(run, "ranks", "0", "proc.json")
    while not os.path.exists(proc):
        time.sleep(0.05)
    time.sleep(1.5)  # mldebug looks for new ranks every 0.5 s
    """
)


def guardians_of(run_dir) -> list[int]:
    """Pids of the guardian processes (mldebug.launch.guardian) still watching `run_dir`."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                argv = handle.read().split(b"\0")
        except OSError:
            continue
        if any(b"mldebug.launch.guardian" in a for a in argv) and str(run_dir).encode() in argv:
            found.append(int(entry))
    return found


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def start_stranger(tmp_path, env):
    (tmp_path / "stranger.py").write_text(STRANGER)
    proc = subprocess.Popen(
        [sys.executable, str(tmp_path / "stranger.py"), str(tmp_path / "signals.log")],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    proc.stdout.readline()
    return proc


def test_a_planted_proc_json_never_gets_a_process_signalled(tmp_path):
    host = hostname()
    paths = RunPaths(tmp_path / "run")
    # GIVEN a stranger that even carries this run's MLDEBUG_RUN_DIR and RANK (mldebug did
    # not start it), named as rank 5 by a proc.json already in the run directory
    env = {**os.environ, "MLDEBUG_RUN_DIR": str(paths.root), "RANK": "5", "WORLD_SIZE": "8"}
    stranger = start_stranger(tmp_path, env)
    helper_pid = None
    try:
        os.makedirs(paths.rank_dir(5), mode=0o700)
        os.chmod(paths.root, 0o700)
        claim = {"rank": 5, "pid": stranger.pid, "host": host}
        claim["start_ticks"] = proc_start_ticks(stranger.pid)
        paths.proc_info(5).write_text(json.dumps(claim))
        # AND a launcher that starts a helper outside the job (named as rank 6 by a
        # proc.json it writes) and a real rank 0 that it leaves running when it exits
        (tmp_path / "launcher.py").write_text(LAUNCHER)
        # WHEN mldebug runs the launcher and ends what it left running
        done = subprocess.run(
            [
                *MLDEBUG,
                "run",
                "--run-dir",
                str(paths.root),
                "--grace-period",
                "1",
                "--",
                sys.executable,
                str(tmp_path / "launcher.py"),
                str(tmp_path / "stranger.py"),
                str(tmp_path / "signals.log"),
                host,
            ],
            env={**os.environ, "MLDEBUG_RUNS_DIR": str(tmp_path / "runs")},
            capture_output=True,
            text=True,
            timeout=120,
        )
        helper_pid = int((paths.root / "helper.pid").read_text())
        # THEN the real rank it left is ended
        rank0 = json.loads(paths.proc_info(0).read_text())["pid"]
        assert "ending 1 rank process(es) the launcher left running" in done.stderr
        for _ in range(100):
            if not alive(rank0):
                break
            time.sleep(0.05)
        assert not alive(rank0)
        # AND neither process a proc.json only claimed got any signal, once nothing of
        # mldebug's is left to send one (its guardian outlives it by a moment)
        for _ in range(600):
            if not guardians_of(paths.root):
                break
            time.sleep(0.05)
        assert not guardians_of(paths.root)
        assert alive(stranger.pid) and alive(helper_pid)
        assert not (tmp_path / "signals.log").exists()
        # AND mldebug says once which claims it did not believe
        for rank, pid in ((5, stranger.pid), (6, helper_pid)):
            note = f"ignored {paths.proc_info(rank)}: pid {pid} is not a process this run started"
            assert done.stderr.count(note) == 1, done.stderr
        manifest = json.loads(paths.manifest.read_text())
        assert [entry["rank"] for entry in manifest["ranks"]] == [0]
    finally:
        stranger.kill()
        stranger.wait()
        if helper_pid is not None and alive(helper_pid):
            os.kill(helper_pid, signal.SIGKILL)


class FakeManifest:
    """The part of launch.manifest.Manifest that WrappedRanks uses, in memory."""

    def __init__(self, launcher_pid):
        self.data = {"launcher_pid": launcher_pid, "world_size": None}
        self.ranks = {}

    def set_rank(self, rank, **fields):
        self.ranks.setdefault(rank, {}).update(fields)

    def update(self, **fields):
        self.data.update(fields)

    def rank_ids(self):
        return sorted(self.ranks)


# A launcher that starts one "rank" (its own child) in run directory argv[1] and waits.
# The rank says its own pid once it runs, as its agent writes proc.json from inside: a pid
# its launcher printed at once may name a process still inside exec, whose /proc environ the
# kernel has not filled yet (a loaded node can keep it there).
TINY_RANK = "import os, time; print(os.getpid(), flush=True); time.sleep(300)"
TINY_LAUNCHER = (
    "import os, subprocess, sys; "
    "env = {**os.environ, 'MLDEBUG_RUN_DIR': sys.argv[1], 'RANK': '0', 'WORLD_SIZE': '1'}; "
    f"subprocess.Popen([sys.executable, '-c', {TINY_RANK!r}], env=env).wait()"
)


def test_wrapped_ranks_believe_only_verified_claims(tmp_path):
    from mldebug.launch.wrapped import WrappedRanks

    paths = RunPaths(tmp_path / "run")
    paths.ranks_dir.mkdir(parents=True)
    launcher = subprocess.Popen(
        [sys.executable, "-c", TINY_LAUNCHER, str(paths.root)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    stranger = start_stranger(tmp_path, {**os.environ, "MLDEBUG_RUN_DIR": str(paths.root)})
    try:
        rank = int(launcher.stdout.readline())
        ticks = proc_start_ticks(stranger.pid)
        claims = {
            0: {"pid": rank},  # the real rank
            1: {"pid": stranger.pid},  # alive, not the launcher's
            2: {"pid": stranger.pid, "start_ticks": ticks - 1},  # an ended process, pid reused
            3: {"pid": launcher.pid},  # the launcher itself is no rank
            4: {"pid": stranger.pid, "host": "another-node"},  # a pid that means nothing here
            5: {"pid": 2**40},
        }
        for number, claim in claims.items():
            paths.rank_dir(number).mkdir()
            paths.proc_info(number).write_text(json.dumps(claim))
        # A manifest whose launcher is a process this mldebug did not start verifies nothing
        stray = WrappedRanks(paths, FakeManifest(stranger.pid))
        stray.discover()
        assert not any(w.verified for w in stray.watched.values())
        # The launcher this process started verifies its own rank only
        wrapped = WrappedRanks(paths, FakeManifest(launcher.pid))
        wrapped.discover()
        assert {r: w.verified for r, w in wrapped.watched.items()} == {0: True, 2: False}
        assert wrapped.gone() == {2: wrapped.watched[2].last_alive}  # reported, not signalled
        assert sorted(wrapped.ignored) == [1, 3] and wrapped.remote == {4}
        said = []
        wrapped.end_left_over(5, threading.Event(), said.append)
        assert len([s for s in said if s.startswith("mldebug: ignored")]) == 2
        assert "ending 1 rank process(es)" in said[-1]
        for _ in range(100):
            if not alive(rank):
                break
            time.sleep(0.05)
        assert not alive(rank)
        assert alive(stranger.pid) and not (tmp_path / "signals.log").exists()
        wrapped.end_left_over(5, threading.Event(), said.append)
        assert len(said) == 3  # each ignored claim said once
    finally:
        stranger.kill()
        stranger.wait()
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
        launcher.wait()


def test_a_rank_that_ends_while_it_is_verified_is_gone_not_a_strangers(tmp_path):
    """On a busy node a rank that exits at once can end between the look that finds it
    alive and the checks of whose it is: it is a gone rank of the run (in run.json), never
    a stranger's claim."""
    from mldebug.launch.wrapped import WrappedRanks

    class EndsMeanwhile(WrappedRanks):
        def _verify(self, pid):
            os.kill(pid, signal.SIGKILL)  # the rank exits just now
            while proc_start_ticks(pid) is not None and alive(pid):
                time.sleep(0.01)
            return super()._verify(pid)

    paths = RunPaths(tmp_path / "run")
    paths.ranks_dir.mkdir(parents=True)
    launcher = subprocess.Popen(
        [sys.executable, "-c", TINY_LAUNCHER, str(paths.root)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        rank = int(launcher.stdout.readline())
        paths.rank_dir(0).mkdir()
        paths.proc_info(0).write_text(json.dumps({"pid": rank}))
        manifest = FakeManifest(launcher.pid)
        wrapped = EndsMeanwhile(paths, manifest)
        wrapped.discover()
        assert wrapped.ignored == {}
        assert set(wrapped.gone()) == {0} and not wrapped.watched[0].verified
        assert manifest.ranks[0]["pid"] == rank
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
        launcher.wait()
