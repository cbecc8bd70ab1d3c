"""The Supervisor as the TUI drives it: no console, stopped programmatically."""

import json
import os
import sys
import time

from mldebug.launch.output import Console
from mldebug.launch.supervisor import LaunchSpec, Supervisor
from mldebug.rundir import create_run_dir, pid_alive

TICKER = """\
import os, sys, time
for i in range(600):
    print("tick", os.environ["RANK"], i, flush=True)
    time.sleep(0.1)
"""


def wait_for(predicate, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition never became true"
        time.sleep(0.05)


def test_quiet_supervisor_is_stopped_and_can_show_output_later(tmp_path, monkeypatch):
    monkeypatch.setenv("MLDEBUG_RUNS_DIR", str(tmp_path / "runs"))
    (tmp_path / "ticker.py").write_text(TICKER)
    paths = create_run_dir(tmp_path / "run")
    supervisor = Supervisor(
        LaunchSpec(paths=paths, command=[sys.executable, str(tmp_path / "ticker.py")], nproc=2,
                   console=None, grace_period=2)
    )
    supervisor.start()
    try:
        wait_for(lambda: all(b"tick" in paths.stdout(r).read_bytes() for r in (0, 1)))
        assert supervisor.wait(timeout=0.1) is None  # still running
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        supervisor.show_output(Console(stdout_fd=write_fd, stderr_fd=write_fd))
        seen = b""

        def shown_new_ticks():
            nonlocal seen
            try:
                seen += os.read(read_fd, 65536)
            except BlockingIOError:
                pass
            return b"] tick 0 " in seen and b"] tick 1 " in seen

        wait_for(shown_new_ticks)
        assert b"] tick 0 0\n" not in seen  # what was written before is not repeated
    finally:
        supervisor.stop()
        code = supervisor.wait()
    assert code == 130
    manifest = json.loads(paths.manifest.read_text())
    assert manifest["status"] == "interrupted"
    assert not any(pid_alive(rank["pid"]) for rank in manifest["ranks"])
    os.close(write_fd)
    os.close(read_fd)
