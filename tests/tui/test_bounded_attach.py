"""`mldebug attach` never waits on a stuck read: quitting is immediate, a poll has a deadline,
and FIFOs in the run directory neither hang a poll nor keep the app from quitting.

py-spy is replaced by a fake (tests/testkit/pyspy_fakes.py); the poller, collector and analysis
are the real ones.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from testkit.pyspy_fakes import fake_pyspy, sleepers, stop
from textual.widgets import DataTable

from mldebug.commands.attach import live_app
from mldebug.live.poller import CollectorPoller
from mldebug.model import STATE_UNREADABLE
from mldebug.targets import resolve_targets
from mldebug.tui.app import AttachApp

SLOW_TIMER = 3600

QUIT_DURING_A_STUCK_POLL = """
import threading, time
from mldebug.commands.attach import live_app

class StuckPoller:
    def poll(self):
        app.call_from_thread(app.action_quit_app)  # q, while this poll hangs for good
        threading.Event().wait()
    def read_native(self, rank):
        return None
    def close(self):
        pass

app = live_app(StuckPoller(), interval=3600)
app.run(headless=True)
print("quit", app.return_code)
"""


def test_the_real_app_quits_at_once_while_its_poll_hangs_for_good():
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", QUIT_DURING_A_STUCK_POLL],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["quit", "0"]
    assert time.monotonic() - started < 30  # it used to wait for the poll: for ever


@pytest.fixture
def run_dir(tmp_path):
    """A followed run directory with one live rank, and FIFOs at every file name a rank
    writes, and at the NCCL log: (path, rank pid)."""
    root = tmp_path / "run"
    root.mkdir(mode=0o700)
    (proc,) = sleepers(1, root)
    manifest = {"status": "running", "world_size": 1, "ranks": [{"rank": 0, "pid": proc.pid}]}
    (root / "run.json").write_text(json.dumps(manifest))
    rank_dir = root / "ranks" / "0"
    rank_dir.mkdir(parents=True)
    for name in ("proc.json", "error.json", "exit.json", "state.json", "events.jsonl"):
        os.mkfifo(rank_dir / name)
    for name in ("stdout.log", "stderr.log", "faulthandler.log"):
        os.mkfifo(rank_dir / name)
    (root / "nccl").mkdir()
    os.mkfifo(root / "nccl" / "node0.1.log")
    yield root, proc.pid
    stop([proc])


@pytest.fixture
def pyspy(tmp_path, monkeypatch):
    path, log = fake_pyspy(tmp_path)
    monkeypatch.setenv("MLDEBUG_PYSPY", path)
    return log


def app_for(root: Path) -> AttachApp:
    poller = CollectorPoller(lambda: resolve_targets(run_dir=root), follow=True)
    return live_app(poller, interval=SLOW_TIMER, run_dir=root)


async def wait_for(pilot, condition, seconds: float = 20) -> None:
    end = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < end, "condition never held"
        await pilot.pause(0.05)


async def test_fifos_in_the_run_directory_neither_hang_a_poll_nor_the_quit(run_dir, pyspy):
    root, pid = run_dir
    app = app_for(root)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: app.polls >= 1 or app.last_error)
        assert app.last_error == ""
        rows = app.query_one(DataTable)
        assert rows.row_count == 1 and str(rows.get_row_at(0)[0]) == "0"
        assert app.snapshot.ranks[0].target.pid == pid
        await pilot.press("q")
        pressed = time.monotonic()
    assert app.return_code == 0 and time.monotonic() - pressed < 3


async def test_a_fifo_in_place_of_run_json_is_waited_on_and_the_app_still_quits(run_dir, pyspy):
    root, _ = run_dir
    (root / "run.json").unlink()
    os.mkfifo(root / "run.json")
    app = app_for(root)
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_for(pilot, lambda: bool(app.last_error))
        assert "no readable run.json" in app.last_error and app.waiting
        await pilot.press("q")
        pressed = time.monotonic()
    assert app.return_code == 0 and time.monotonic() - pressed < 3


def test_a_poll_of_ranks_that_hang_py_spy_ends_by_its_deadline(tmp_path, monkeypatch):
    procs = sleepers(3)
    path, _ = fake_pyspy(tmp_path, hang=True)
    monkeypatch.setenv("MLDEBUG_PYSPY", path)
    monkeypatch.setattr(CollectorPoller, "POLL_DEADLINE", 1.0)
    poller = CollectorPoller(lambda: resolve_targets(pids=[p.pid for p in procs]))
    try:
        started = time.monotonic()
        snapshot = poller.poll()
        took = time.monotonic() - started
    finally:
        poller.close()
        stop(procs)
    assert took < 4, took  # py-spy's own limit is 5 s a rank
    assert {view.state for view in snapshot.ranks} == {STATE_UNREADABLE}
