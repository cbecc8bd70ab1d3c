"""Stacks without ptrace: a rank of an `mldebug run` job gives its own stacks (its agent's
thread, on its abstract socket; faulthandler, on the signal its agent registered, where the
thread cannot run) when py-spy is refused, unsupported or missing.

Real jobs, real py-spy, real refusals: the ranks make themselves non-dumpable
(tests/jobs/nondumpable_job.py) and `mldebug dump` runs as a user without CAP_SYS_PTRACE
(tests/testkit/noptrace.py says which). The one stand-in is a py-spy that answers
"Unsupported version of Python", as py-spy does for a Python it does not know (3.15, a
free-threaded build): no such interpreter exists here.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
from testkit.jobs import line_of, stop, wait_ready
from testkit.noptrace import Restricted, py_spy_refused, restricted

from mldebug.agent.stackthread import render
from mldebug.collect.rankstacks import ask_rank, parse_faulthandler
from mldebug.files.procfs import proc_start_ticks
from mldebug.files.safeio import write_json_atomic
from mldebug.launch import env as envs
from mldebug.model import FAIL_ERROR, RankTarget
from mldebug.rankrules import stack_signals, stack_socket_name

ROOT = Path(__file__).resolve().parent.parent
JOB = ROOT / "tests" / "jobs" / "nondumpable_job.py"
SOURCE = JOB.read_text()
MLDEBUG = [sys.executable, "-m", "mldebug"]
PYENV = Path("/root/.pyenv/versions")


# --- faulthandler's format, as each installed CPython writes it -----------------------------

DUMPER = textwrap.dedent(
    """\
    import faulthandler, sys, threading, time

    def parked():
        time.sleep(30)  # PARKED_LINE

    def main():
        threading.Thread(target=parked, name="parked", daemon=True).start()
        time.sleep(0.3)
        faulthandler.dump_traceback(sys.stdout, all_threads=True)  # DUMP_LINE
        print("MAIN", threading.main_thread().ident)

    main()
    """
)


def interpreters() -> list[str]:
    found = [sys.executable]
    for version in ("3.10", "3.12", "3.13"):
        found += sorted(str(p / "bin" / "python3") for p in PYENV.glob(f"{version}.*"))[:1]
    return found


@pytest.mark.compat
@pytest.mark.parametrize("python", interpreters())
def test_faulthandler_output_of_each_python_parses_to_the_model(python, tmp_path):
    script = tmp_path / "dumper.py"
    script.write_text(DUMPER)
    done = subprocess.run([python, str(script)], capture_output=True, text=True, timeout=60)
    text, _, main = done.stdout.rpartition("MAIN ")
    threads = parse_faulthandler(text, pid=4242, main_ident=int(main))
    assert threads[0].name == "MainThread" and threads[0].os_thread_id == 4242
    frames = threads[0].frames
    assert [f.function for f in frames] == ["<module>", "main"]  # outermost first
    assert frames[-1].location == f"{script}:{line_of(DUMPER, 'DUMP_LINE')}"
    parked = next(t for t in threads[1:] if t.frames and t.frames[-1].function == "parked")
    assert parked.frames[-1].line == line_of(DUMPER, "PARKED_LINE")


def test_text_without_a_thread_is_refused():
    with pytest.raises(ValueError):
        parse_faulthandler("Fatal Python error: Segmentation fault\n\n")


# --- who is signalled: only a verified rank, only with its registered signal ----------------


def _rank_dir(tmp_path: Path, info: dict) -> Path:
    run_dir = tmp_path / "run"
    (run_dir / "ranks" / "0").mkdir(parents=True)
    write_json_atomic(run_dir / "run.json", {"status": "running", "ranks": []})
    write_json_atomic(run_dir / "ranks" / "0" / "proc.json", info)
    (run_dir / "ranks" / "0" / "stacks.txt").touch()
    return run_dir


@pytest.mark.parametrize(
    "claim, why",
    [
        ({"stack_signal": "registered"}, "no longer catches the stack signal"),
        ({"stack_signal": int(signal.SIGKILL)}, "registered no stack signal"),
        ({"stack_signal": "registered", "start_ticks": 1}, "does not name this process"),
    ],
)
def test_a_process_that_cannot_answer_is_never_signalled(claim, why, tmp_path):
    """A plain process (no handler), a proc.json naming a signal the agent never registers,
    and one whose start time is not the process's (a reused pid): each is left alone."""
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        info = {
            "pid": sleeper.pid,
            "start_ticks": proc_start_ticks(sleeper.pid),
            "main_thread": 1,
            **claim,
        }
        if info["stack_signal"] == "registered":
            info["stack_signal"] = stack_signals()[0]
        run_dir = _rank_dir(tmp_path, info)
        target = RankTarget(pid=sleeper.pid, rank=0, world_size=1, run_dir=str(run_dir))
        sample = ask_rank(target, "ptrace refused", timeout=1.0)
        assert sample.failure == FAIL_ERROR and why in sample.failure_detail
        time.sleep(0.2)
        assert sleeper.poll() is None  # not killed: nothing was sent
    finally:
        sleeper.kill()
        sleeper.wait()


# --- the agent's thread answers; the signal only where the GIL is kept --------------------

PARKED = textwrap.dedent(
    """\
    import faulthandler, sys, threading, time
    sys.path.insert(0, sys.argv[1])
    from mldebug.agent.stackthread import render

    def parked(ready):
        ready.set()
        time.sleep(30)

    ready = threading.Event()
    threading.Thread(target=parked, args=(ready,), daemon=True).start()
    ready.wait()
    time.sleep(0.2)
    print(render(sys._current_frames()))
    print("=====", flush=True)
    faulthandler.dump_traceback(sys.stdout, all_threads=True)
    """
)


@pytest.mark.compat
@pytest.mark.parametrize("python", interpreters())
def test_the_agents_thread_writes_what_faulthandler_writes(python, tmp_path):
    """The thread writes faulthandler's format: a parked thread reads the same both ways."""
    done = subprocess.run(
        [python, "-c", PARKED, str(ROOT)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    parked = [
        [t.frames for t in parse_faulthandler(text) if t.frames[0].function != "<module>"]
        for text in done.stdout.split("=====\n")
    ]
    assert parked[0] == parked[1] and len(parked[0]) == 1
    assert [frame.function for frame in parked[0][0]][-2:] == ["run", "parked"]


BUSY_RANK = textwrap.dedent(
    """\
    import ctypes, json, sys, threading, time

    def churn():
        data = {"a": [list(range(50)) for _ in range(20)], "b": {"x": {"y": [1.5] * 30}}}
        while True:
            json.dumps(data, indent=1)
            time.sleep(0.001)

    def depth(n):
        return 0 if n == 0 else 1 + depth(n - 1)

    for _ in range(3):
        threading.Thread(target=churn, daemon=True).start()
    print("ready", flush=True)
    if sys.argv[1] == "keep-gil":
        ctypes.PyDLL(None).sleep(60)  # C code that never lets go of the GIL
    while True:
        depth(200)
        time.sleep(0.0005)
    """
)


def _hooked_rank(tmp_path: Path, mode: str) -> tuple[subprocess.Popen, RankTarget]:
    env = {**os.environ, **envs.hook_env(dict(os.environ), tmp_path / "run", envs.MODE_NATIVE)}
    env.update({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"})
    proc = subprocess.Popen(
        [sys.executable, "-c", BUSY_RANK, mode], env=env, stdout=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    return proc, RankTarget(pid=proc.pid, rank=0, world_size=1, run_dir=str(tmp_path / "run"))


def _answered_by(sample) -> str:
    """Who wrote the stacks: faulthandler lists every thread, the agent's own answering
    thread among them; the thread leaves itself out."""
    files = {frame.file for thread in sample.threads for frame in thread.frames}
    return "signal" if any(f.endswith("stackthread.py") for f in files) else "thread"


def _asked_directly(pid: int) -> bytes:
    """One answer of the agent's thread, read as `dump` reads it, without the checks."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(10)
        conn.connect(stack_socket_name(pid, proc_start_ticks(pid) or 0))
        return b"".join(iter(lambda: conn.recv(1 << 16), b""))


def test_a_rank_with_busy_threads_is_asked_thousands_of_times_and_lives(tmp_path):
    """faulthandler's signal crashed such a rank (SIGSEGV) about once in 550 requests: it
    walks the threads' frames while they change. The agent's thread answers instead, with
    the GIL held: two thousand requests back to back, then dumps' readings, and the rank
    lives."""
    proc, target = _hooked_rank(tmp_path, "busy")
    try:
        for _ in range(2000):
            assert b"in churn" in _asked_directly(proc.pid)
        for _ in range(10):
            sample = ask_rank(target, "ptrace refused", timeout=5.0)
            assert sample.failure is None, sample.failure_detail
            assert _answered_by(sample) == "thread"
            main = sample.threads[0]
            assert main.name == "MainThread" and main.frames[0].function == "<module>"
            busy = [t for t in sample.threads if any(f.function == "churn" for f in t.frames)]
            assert len(busy) == 3
        assert proc.poll() is None
        assert not (tmp_path / "run" / "ranks" / "0" / "stacks.txt").read_bytes()  # no signal
    finally:
        proc.kill()
        proc.wait()


def test_an_answer_from_a_process_that_is_not_the_rank_is_never_read(tmp_path):
    """Another process that took the rank's socket name first is not the rank (the kernel
    says who answers): its answer is never read, and the rank, which catches no signal,
    is not asked at all."""
    sleeper = subprocess.Popen(["sleep", "60"])
    squatter = None
    try:
        name = stack_socket_name(sleeper.pid, proc_start_ticks(sleeper.pid) or 0)
        squatter = subprocess.Popen(
            [sys.executable, "-c", SQUATTER, name.hex()], stdout=subprocess.PIPE
        )
        assert squatter.stdout is not None and squatter.stdout.readline() == b"ready\n"
        info = {
            "pid": sleeper.pid,
            "start_ticks": proc_start_ticks(sleeper.pid),
            "main_thread": 1,
            "stack_signal": stack_signals()[0],
        }
        run_dir = _rank_dir(tmp_path, info)
        target = RankTarget(pid=sleeper.pid, rank=0, world_size=1, run_dir=str(run_dir))
        sample = ask_rank(target, "ptrace refused", timeout=3.0)
        assert sample.failure == FAIL_ERROR, sample
        assert "no longer catches the stack signal" in sample.failure_detail
        assert sleeper.poll() is None
    finally:
        for each in (sleeper, squatter):
            if each is not None:
                each.kill()
                each.wait()


SQUATTER = textwrap.dedent(
    """\
    import socket, sys
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(bytes.fromhex(sys.argv[1]))
    server.listen(8)
    print("ready", flush=True)
    while True:
        conn, _ = server.accept()
        conn.sendall(b'Thread 0x1 (most recent call first):\\n  File "/planted.py", line 1 in x\\n')
        conn.close()
    """
)


def test_a_rank_that_keeps_the_gil_is_read_by_the_signal(tmp_path):
    """A thread stuck in C code with the GIL keeps the agent's thread from running; after
    POLITE seconds the signal is sent, and faulthandler (safe there: no frame can change)
    names the function holding it."""
    proc, target = _hooked_rank(tmp_path, "keep-gil")
    try:
        time.sleep(0.3)  # in the C call
        sample = ask_rank(target, "ptrace refused", timeout=5.0)
        assert sample.failure is None, sample.failure_detail
        assert _answered_by(sample) == "signal"
        assert sample.threads[0].name == "MainThread"
        assert sample.threads[0].frames[-1].function == "<module>"
    finally:
        proc.kill()
        proc.wait()


# --- a run's non-dumpable ranks are its ranks, and nothing else is --------------------------

RESOLVE = """\
import json, sys
from mldebug.targets import resolve_targets
from mldebug.errors import MldebugError
try:
    job = resolve_targets(run_dir=sys.argv[1])
    print(json.dumps({"pids": [t.pid for t in job.targets], "notes": list(job.notes)}))
except MldebugError as error:
    print(json.dumps({"pids": [], "notes": [str(error)]}))
"""

NONDUMPABLE_SLEEPER = (
    "import ctypes, time; ctypes.CDLL(None).prctl(4, 0, 0, 0, 0); print('in', flush=True); "
    "time.sleep(60)"
)


def _resolve_as(user: Restricted, run_dir: Path) -> dict:
    done = subprocess.run(
        [*user.prefix, sys.executable, "-c", RESOLVE, str(run_dir)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_non_dumpable_ranks_are_known_by_descent_and_start_time():
    """Unreadable environment: a process is the run's rank when it descends from the `mldebug
    run` process run.json names (pid and start time) and started when its agent said."""
    user = restricted()
    folder = Path(tempfile.mkdtemp(prefix="mldebug-noptrace-"))
    rank = subprocess.Popen(
        [*user.prefix, sys.executable, "-c", NONDUMPABLE_SLEEPER], stdout=subprocess.PIPE
    )
    other = subprocess.Popen(["sleep", "60"])
    try:
        assert rank.stdout is not None and rank.stdout.readline() == b"in\n"
        # the process runs (through runuser or setpriv) under this one: its `mldebug run`
        ancestor = os.getpid()
        cases = {
            "launcher": (ancestor, proc_start_ticks(ancestor), proc_start_ticks(rank.pid)),
            "stranger launcher": (
                other.pid,
                proc_start_ticks(other.pid),
                proc_start_ticks(rank.pid),
            ),
            "reused pid": (ancestor, proc_start_ticks(ancestor), 1),
            "restarted launcher": (ancestor, 1, proc_start_ticks(rank.pid)),
        }
        seen = {}
        for name, (launcher, launcher_ticks, rank_ticks) in cases.items():
            run_dir = folder / name.replace(" ", "-")
            (run_dir / "ranks" / "0").mkdir(parents=True)
            manifest = {"status": "running", "world_size": 1, "ranks": []}
            manifest.update(mldebug_pid=launcher, mldebug_start_ticks=launcher_ticks)
            write_json_atomic(run_dir / "run.json", manifest)
            proc_json = {"rank": 0, "pid": rank.pid, "start_ticks": rank_ticks, "host": None}
            write_json_atomic(run_dir / "ranks" / "0" / "proc.json", proc_json)
            for path in (run_dir, run_dir / "ranks", run_dir / "ranks" / "0"):
                path.chmod(0o700)
            for path in (folder, run_dir, run_dir / "ranks", run_dir / "ranks" / "0"):
                user.own(path)
            seen[name] = _resolve_as(user, run_dir)
        assert seen["launcher"]["pids"] == [rank.pid]
        for name in ("stranger launcher", "reused pid", "restarted launcher"):
            assert seen[name]["pids"] == [], name
            assert any("not its ranks" in note for note in seen[name]["notes"]), name
    finally:
        for proc in (rank, other):
            proc.kill()
            proc.wait()
        shutil.rmtree(folder, ignore_errors=True)


# --- real jobs ---------------------------------------------------------------------------


def _start(user: Restricted, folder: Path, mode: str, nproc: int) -> tuple[subprocess.Popen, Path]:
    run_dir = folder / "run"
    command = [*MLDEBUG, "run", "--run-dir", str(run_dir), "--nproc-per-node", str(nproc)]
    proc = subprocess.Popen(
        [*user.prefix, *command, str(JOB), mode],
        cwd=folder,
        env={**os.environ, "MLDEBUG_RUNS_DIR": str(folder / "runs")},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    return proc, run_dir


def _folder(user: Restricted) -> Path:
    folder = Path(tempfile.mkdtemp(prefix="mldebug-noptrace-"))
    folder.chmod(0o755)
    user.own(folder)
    return folder


def _dump(user: Restricted | None, run_dir: Path, *options: str, env: dict | None = None):
    done = subprocess.run(
        [*(user.prefix if user else ()), *MLDEBUG, "dump", "--run", str(run_dir), *options],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
        env={**os.environ, "NO_COLOR": "1", "COLUMNS": "200", **(env or {})},
    )
    return done


@pytest.fixture(scope="module")
def stuck_job():
    """4 non-dumpable ranks started by a user without ptrace rights; rank 2 sits outside the
    all_reduce the others wait in."""
    user = restricted()
    folder = _folder(user)
    proc, run_dir = _start(user, folder, "stuck", 4)
    try:
        wait_ready(proc, run_dir, 4)
        yield user, run_dir
    finally:
        stop(proc)
        shutil.rmtree(folder, ignore_errors=True)


def _pids(run_dir: Path) -> list[int]:
    infos = (json.loads((run_dir / "ranks" / str(r) / "proc.json").read_text()) for r in range(4))
    return [info["pid"] for info in infos]


def _dump_until_verdict(user: Restricted | None, run_dir: Path, *options: str, env=None):
    """`_dump` again until it gives a verdict (exit 1): a wait is an error once it has lasted
    (the severity rules), so the first dumps right after READY may still say 0."""
    deadline = time.monotonic() + 120
    while True:
        done = _dump(user, run_dir, *options, env=env)
        if done.returncode != 0 or time.monotonic() > deadline:
            return done
        time.sleep(2)


def _names_the_stuck_rank(report: dict) -> None:
    culprit = report["findings"][0]
    assert culprit["severity"] == "error" and culprit["ranks"] == [2], culprit
    assert culprit["location"] == f"{JOB}:{line_of(SOURCE, 'STUCK_LINE')}"


@pytest.mark.multirank
@pytest.mark.compat
@pytest.mark.timeout(600)
def test_dump_with_py_spy_names_the_stuck_rank_by_its_stack(stuck_job):
    """The same job read by a user py-spy may read (CAP_SYS_PTRACE): the verdict by stack,
    from py-spy."""
    _, run_dir = stuck_job
    done = _dump_until_verdict(None, run_dir, "--json")
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    _names_the_stuck_rank(report)
    assert {rank["stack_source"] for rank in report["ranks"]} == {"py-spy"}


@pytest.mark.multirank
@pytest.mark.compat
@pytest.mark.timeout(600)
def test_dump_without_ptrace_names_the_stuck_rank_from_the_ranks_own_stacks(stuck_job):
    user, run_dir = stuck_job
    assert py_spy_refused(user, _pids(run_dir)[0]), f"py-spy read a non-dumpable rank as {user.who}"
    done = _dump_until_verdict(user, run_dir, "--json")
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    _names_the_stuck_rank(report)
    sources = {rank["rank"]: rank["stack_source"] for rank in report["ranks"]}
    assert all(source.endswith("ptrace refused") for source in sources.values()), sources
    text = _dump(user, run_dir)
    assert text.returncode == 1, text.stderr
    assert "stacks of ranks 0-3 from the rank itself (its agent): ptrace refused" in text.stdout
    assert f"nondumpable_job.py:{line_of(SOURCE, 'STUCK_LINE')} in load_shard" in text.stdout


ATTACH = """\
import json, sys, time
from mldebug.live.poller import CollectorPoller
from mldebug.targets import resolve_targets
poller = CollectorPoller(lambda: resolve_targets(run_dir=sys.argv[1]))
for _ in range(4):
    snapshot = poller.poll()
    time.sleep(0.5)
poller.close()
first = snapshot.findings[0]
sources = sorted({view.stack_source for view in snapshot.ranks})
print(json.dumps({"ranks": list(first.ranks), "severity": first.severity,
                  "location": first.location, "sources": sources}))
"""


@pytest.mark.multirank
@pytest.mark.timeout(600)
def test_attach_without_ptrace_polls_the_ranks_own_stacks(stuck_job):
    """What `mldebug attach` polls (live.poller), as the user without ptrace rights."""
    user, run_dir = stuck_job
    done = subprocess.run(
        [*user.prefix, sys.executable, "-c", ATTACH, str(run_dir)],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["ranks"] == [2] and seen["severity"] == "error", seen
    assert seen["location"] == f"{JOB}:{line_of(SOURCE, 'STUCK_LINE')}"
    assert seen["sources"] == ["the rank itself (its agent): ptrace refused"]


@pytest.mark.multirank
@pytest.mark.timeout(600)
def test_py_spy_that_does_not_support_the_python_gets_the_same_verdict(stuck_job, tmp_path):
    user, run_dir = stuck_job
    stub = tmp_path / "py-spy"
    stub.write_text('#!/bin/sh\necho "Error: Unsupported version of Python: 3.15.0" >&2\nexit 1\n')
    stub.chmod(0o755)
    path = f"{tmp_path}:{os.environ['PATH']}"
    done = _dump_until_verdict(
        None, run_dir, "--json", env={"MLDEBUG_PYSPY": str(stub), "PATH": path}
    )
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    _names_the_stuck_rank(report)
    for rank in report["ranks"]:
        assert rank["stack_source"].endswith("py-spy does not support this Python"), rank


@pytest.mark.multirank
@pytest.mark.compat
@pytest.mark.timeout(600)
def test_asking_a_healthy_job_for_its_stacks_does_not_disturb_it():
    """Never cry wolf, never harm: a training job asked for its stacks again and again
    trains on, ends with exit code 0, and the dump finds nothing wrong."""
    user = restricted()
    folder = _folder(user)
    proc, run_dir = _start(user, folder, "healthy", 2)
    try:
        wait_ready(proc, run_dir, 2)
        for _ in range(3):
            done = _dump(user, run_dir, "--json", "--samples", "5", "--interval", "0.1")
            assert done.returncode == 0, done.stdout + done.stderr
            report = json.loads(done.stdout)
            assert not [f for f in report["findings"] if f["severity"] == "error"], report
            assert all("rank itself" in rank["stack_source"] for rank in report["ranks"])
        (folder / "STOP").touch()
        assert proc.wait(timeout=120) == 0
        for rank in range(2):
            log = (run_dir / "ranks" / str(rank) / "stdout.log").read_text()
            assert f"DONE {rank} " in log
    finally:
        stop(proc)
        shutil.rmtree(folder, ignore_errors=True)


# --- pystack, where installed: a job not under `mldebug run`, a Python py-spy cannot read ---

DATA = ROOT / "tests" / "data"


def test_pystack_text_parses_to_the_model():
    """Recorded from the real pystack 1.7.2 (`pystack remote --no-color`) on a 3-thread
    process, pid 28486."""
    from mldebug.collect.pystack import parse_pystack

    threads = parse_pystack((DATA / "pystack_three_threads_pid28486.txt").read_text(), 28486)
    assert [t.name for t in threads] == ["MainThread", "", ""]
    assert [f.location for f in threads[0].frames] == [
        "/tmp/srv/train.py:21",
        "/tmp/srv/train.py:18",
    ]
    spinner = next(t for t in threads if t.owns_gil)
    assert spinner.frames[-1].function == "spin" and spinner.frames[-1].line == 12
    with pytest.raises(ValueError):
        parse_pystack((DATA / "pystack_error_permission.txt").read_text(), 1)


def test_a_plain_job_py_spy_cannot_read_is_read_with_pystack(tmp_path):
    from mldebug.collect.pystack import find_pystack

    pystack = find_pystack()
    if pystack is None:
        pytest.skip("pystack is not installed (pip install pystack)")
    stub = tmp_path / "py-spy"
    stub.write_text('#!/bin/sh\necho "Error: Unsupported version of Python: 3.15.0" >&2\nexit 1\n')
    stub.chmod(0o755)
    script = tmp_path / "train.py"
    script.write_text(
        "import time\nprint('in', flush=True)\nwhile True:\n    time.sleep(0.5)  # HERE\n"
    )
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"in\n"
        done = subprocess.run(
            [*MLDEBUG, "dump", "--pid", str(proc.pid), "--json"],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "MLDEBUG_PYSPY": str(stub), "MLDEBUG_PYSTACK": pystack},
        )
        assert done.returncode in (0, 1), done.stderr
        rank = json.loads(done.stdout)["ranks"][0]
        assert rank["stack_source"] == "pystack: py-spy does not support this Python"
        assert rank["location"] == f"{script}:4"
    finally:
        proc.kill()
        proc.wait()


def test_the_threads_answer_names_the_threads_and_stays_one_line_each():
    """Thread names are the program's data: a name with a newline or a bracket stays on its
    header line, escaped as faulthandler escapes text, and is read back."""
    import threading as threads_module

    parked = threads_module.Event()
    worker = threads_module.Thread(target=parked.wait, name="pin]\nmemory\x1b[2J", daemon=True)
    worker.start()
    try:
        names = {t.ident: t.name for t in threads_module.enumerate()}
        text = render(sys._current_frames(), names=names)
        (read,) = [t for t in parse_faulthandler(text) if t.thread_id == worker.ident]
        assert read.name == "pin]\\x0amemory\\x1b[2J"
        assert read.frames[-1].function == "wait"
    finally:
        parked.set()
        worker.join()
