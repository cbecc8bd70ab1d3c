"""The live view of a job on several nodes (`attach --slurm/--hosts`) keeps every key of
the rank screen: one whose reading is done on the rank's own node says so in one line."""

from __future__ import annotations

import time

from testkit.tui_fakes import hung_job

from mldebug.cluster.front import ClusterPoller, ClusterSpec
from mldebug.commands.attach import live_app
from mldebug.tui.feeds import Poller
from mldebug.tui.screens.all_threads import AllThreadsScreen
from mldebug.tui.screens.rank_screen import RankScreen


async def wait_for(pilot, condition, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await pilot.pause(0.1)


def test_the_cluster_poller_is_a_poller_of_the_live_view():
    assert isinstance(ClusterPoller(ClusterSpec(hosts=("n01",))), Poller)


async def test_g_on_a_rank_of_another_node_says_where_its_threads_are_read():
    # The first collection is handed in, as `attach --hosts` does after checking the job;
    # the view polls again only after an hour, so no node is asked here.
    poller = ClusterPoller(ClusterSpec(hosts=("n01", "n02")), first=hung_job())
    app = live_app(poller, interval=3600)
    async with app.run_test(size=(120, 40)) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        await pilot.press("enter")
        assert isinstance(app.screen, RankScreen)
        await pilot.press("g")
        screen = app.screen
        assert isinstance(screen, AllThreadsScreen)
        body = screen.query_one("#all-threads-body")
        await wait_for(pilot, lambda: "gdb could not read rank 0" in str(body.render()))
        text = str(body.render())
        assert "on its own node" in text and "mldebug dump --native-all" in text
        assert "attribute" not in text  # not the Python error of a missing method
