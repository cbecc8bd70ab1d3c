"""The all-threads key of the rank screen: `g` reads every thread of the rank with the real
gdb, off the UI thread, through the real poller, on real plain-Python ranks (the sleepy
job: no torch needed to show gdb's view of a process)."""

from __future__ import annotations

import shutil
import time

import pytest

from mldebug.commands.attach import live_app
from mldebug.live.poller import CollectorPoller
from mldebug.targets import resolve_targets
from mldebug.tui.screens.all_threads import AllThreadsScreen
from mldebug.tui.screens.rank_screen import RankScreen

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.skipif(shutil.which("gdb") is None, reason="needs gdb (.ci/run installs it)"),
]


async def wait_for(pilot, condition, seconds: float = 120.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await pilot.pause(0.1)


async def test_g_shows_every_thread_of_the_rank_from_gdb_while_the_ui_stays_live(sleepy_job):
    pids = sleepy_job.rank_pids
    poller = CollectorPoller(lambda: resolve_targets(pids=pids))
    app = live_app(poller, interval=3600)
    async with app.run_test(size=(120, 40)) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        # GIVEN the detail of rank 0, WHEN g is pressed
        await pilot.press("enter")
        assert isinstance(app.screen, RankScreen)
        await pilot.press("g")
        screen = app.screen
        assert isinstance(screen, AllThreadsScreen)
        body = screen.query_one("#all-threads-body")
        # THEN the screen comes up at once, saying that it reads (the read runs in its own
        # thread: a quick gdb may have answered by the time the key's handling is over)...
        first = str(body.render())
        assert "reading every thread of rank 0 with gdb" in first or "read by gdb" in first
        # ...and shows the rank's threads with native and Python frames when gdb answers
        await wait_for(pilot, lambda: "read by gdb" in str(body.render()))
        text = str(body.render())
        assert f"Thread {pids[0]}" in text and "Python: MainThread" in text
        assert "pysleep" in text and "C runtime" in text  # time.sleep in C, then libc
        assert "py wait_for_peers" in text
        await pilot.press("escape")
        assert isinstance(app.screen, RankScreen)
