"""SVG snapshots of the attach screens at 80x24 and 160x48 (pytest-textual-snapshot).

Everything time-dependent is fixed: the fake job's clock is a constant, the refresh timer
never fires, and times are shown in UTC. Update after an intended change with
`pytest tests/tui/test_snapshots.py --snapshot-update` and look at the report.
"""

from __future__ import annotations

import time

import pytest
from testkit.tui_fakes import FakePoller, hung_job

from mldebug.commands.attach import live_app
from mldebug.tui.app import AttachApp
from mldebug.tui.widgets.stack_tree import StackTree

SIZES = {"small": (80, 24), "large": (160, 48)}


@pytest.fixture(autouse=True)
def utc(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def make_app(world_size: int = 4, **kwargs) -> AttachApp:
    poller = FakePoller(lambda tick: hung_job(world_size, tick=0))
    app = live_app(poller, interval=3600, job_name="train.py — ranks 0-3 of 4", **kwargs)
    # The tree scrolls its cursor into view: without animation it is there at once, so
    # the picture never lands halfway through a scroll.
    app.animation_level = "none"
    return app


def after(*keys):
    async def run_before(pilot) -> None:
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        if keys:
            await pilot.press(*keys)
            await pilot.app.workers.wait_for_complete()
            await pilot.pause()
        # The tree places its cursor after a refresh, then scrolls it into view after the
        # next one (and again when the banner above it grows): the picture is taken once
        # those refreshes are through.
        for _ in range(4):
            await pilot.wait_for_scheduled_animations()
            await pilot.pause()
        # The tree scrolls its cursor into view at a later refresh (a poll, a resize); the
        # picture is of that screen, not of the frame before it.
        for tree in pilot.app.query(StackTree):
            if tree.cursor_node is not None:
                tree.scroll_to_node(tree.cursor_node, animate=False)
        await pilot.pause()

    return run_before


@pytest.mark.parametrize("size", SIZES)
def test_overview(snap_compare, size):
    assert snap_compare(make_app(), terminal_size=SIZES[size], run_before=after())


@pytest.mark.parametrize("size", SIZES)
def test_rank_detail(snap_compare, size):
    assert snap_compare(make_app(), terminal_size=SIZES[size], run_before=after("down", "enter"))


def test_compare_large(snap_compare):
    keys = ("enter", "c", "1", "enter")
    assert snap_compare(make_app(), terminal_size=SIZES["large"], run_before=after(*keys))


def test_overview_many_ranks_small(snap_compare):
    assert snap_compare(make_app(world_size=256), terminal_size=SIZES["small"], run_before=after())


def test_memory_tab_large(snap_compare):
    assert snap_compare(make_app(), terminal_size=SIZES["large"], run_before=after("3"))
