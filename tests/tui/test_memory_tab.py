"""The Memory tab: what grows, shown from the real analysis of agents' timelines, and the `c`
key that asks the agents for a census. The poller is a fake (tui_fakes.FakePoller); the
snapshot it hands out is made by the real analysis from state.json sections written by the
agent's own Timeline and read by the real parser."""

from __future__ import annotations

import json
import random

from testkit.tui_fakes import FIXED_TIME, FakePoller, Frame
from textual.widgets import Static, TabbedContent

from mldebug.agent.memory_timeline import Timeline
from mldebug.analysis.snapshot import build_snapshot
from mldebug.collect.agentstate import parse_state
from mldebug.model import RankTarget, StackSample, ThreadStack
from mldebug.tui.app import AttachApp

MB = 1_000_000


def leaking_job(tick: int = 0):
    """4 ranks computing; rank 2's memory grows 3 MB a second for 60 s, the others' do not."""
    rng = random.Random(4)
    targets = [RankTarget(pid=100 + r, rank=r, world_size=4, run_dir="/runs/x") for r in range(4)]
    samples, agents = {}, {}
    for target in targets:
        timeline = Timeline()
        for i in range(60):
            rss = 400 * MB + (3 * MB * i if target.rank == 2 else 0) + rng.gauss(0, MB)
            timeline.add(FIXED_TIME - 60 + i, int(rss), None, i * 10, i * 10)
        data = {
            "version": 1,
            "rank": target.rank,
            "pid": target.pid,
            "time": FIXED_TIME,
            "started": FIXED_TIME - 70,
            "memory_timeline": timeline.section(),
        }
        agents[target.pid] = parse_state(json.loads(json.dumps(data)), target.rank)
        samples[target.pid] = tuple(
            StackSample(
                target,
                FIXED_TIME - 0.8 + 0.4 * i,
                threads=(ThreadStack(1, "MainThread", (Frame("train", "/job/t.py", 10 + i),)),),
                cpu_seconds=5.0 + i,
                main_cpu_seconds=4.0 + i,
            )
            for i in range(3)
        )
    return build_snapshot(targets, samples, 4, now=FIXED_TIME, agents=agents)


class CensusPoller(FakePoller):
    def __init__(self) -> None:
        super().__init__(make=leaking_job)
        self.census_requests = 0

    def request_census(self) -> str:
        self.census_requests += 1
        return "census asked for"


async def test_the_memory_tab_says_what_grows_and_c_asks_for_a_census():
    poller = CensusPoller()
    app = AttachApp(poller, interval=3600)
    async with app.run_test(size=(160, 40)) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        await pilot.press("3")
        assert app.query_one(TabbedContent).active == "memory"
        growth = app.query_one("#memory-growth", Static)
        shown = str(growth.render())
        assert shown.startswith("rank 2: memory (RSS) grows 2.9 MiB/s"), shown
        assert "while ranks 0-1,3 stay flat" in shown
        app.query_one("#memory-table").focus()
        await pilot.press("c")
        await pilot.pause()
        assert poller.census_requests == 1


async def test_nothing_is_shown_while_nothing_grows():
    app = AttachApp(FakePoller(), interval=3600)
    async with app.run_test(size=(160, 40)) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        await pilot.press("3")
        assert not app.query_one("#memory-growth", Static).display
