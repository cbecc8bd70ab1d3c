"""The Timing tab marks a change over time: for the ranks a `slowdown` finding names, the
whole run's step times replace the window's, the bars from the change on stand out, and the
mark says from when. The agents' states carry a history made by the real agent code
(testkit/changekit.py) and are judged by the real analysis."""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

import pytest
from testkit.changekit import healthy, history_section, slower
from testkit.tui_fakes import FakePoller
from textual.widgets import DataTable, Static

from mldebug.tui.app import AttachApp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/timing_sim.py

from timing_sim import simulate, snapshot  # noqa: E402


def slowed_job(tick: int = 0, slow: bool = True):
    states = simulate(world=4, jitter=0.1, steps=40, seed=7)
    for rank, state in enumerate(states):
        shape = healthy(random.Random(rank))
        if slow:
            shape = slower(shape, 600, "data", 0.06)
        state["timing"]["history"] = history_section(shape, 800)["history"]
    return snapshot(states)


def make_app(make=slowed_job) -> AttachApp:
    return AttachApp(FakePoller(make), interval=3600, job_name="train.py — ranks 0-3 of 4")


async def open_timing(app: AttachApp, pilot) -> DataTable:
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()
    await pilot.press("7")
    await pilot.pause()
    return app.query_one("#timing-table", DataTable)


async def test_the_sparkline_marks_where_every_rank_slowed_down():
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        table = await open_timing(app, pilot)
        for i in range(table.row_count):
            row = table.get_row_at(i)
            spark, mark = row[-2], row[-1]
            assert str(mark).startswith("◀ slower from ~"), str(mark)
            assert 590 <= int(str(mark).rsplit("~", 1)[1]) <= 608  # it began at step 600
            assert set(str(spark)) <= set("▁▂▃▄▅▆▇█") and len(str(spark)) == 24
            styles = {str(span.style) for span in spark.spans}
            assert "dim" in styles and "bold yellow" in styles
            # the whole run: the newest bars (after the change) are the tallest
            assert str(spark)[-1] == "█" and str(spark)[0] in "▁▂"
        summary = str(app.query_one("#timing-summary", Static).render())
        assert "every rank's step takes" in summary and "waiting for data" in summary


async def test_a_steady_job_keeps_the_windows_sparkline_and_no_mark():
    app = make_app(lambda tick=0: slowed_job(tick, slow=False))
    async with app.run_test(size=(160, 48)) as pilot:
        table = await open_timing(app, pilot)
        assert all(str(table.get_row_at(i)[-1]) == "" for i in range(table.row_count))
        assert all(not table.get_row_at(i)[-2].spans for i in range(table.row_count))


@pytest.fixture(autouse=True)
def utc(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_timing_tab_with_a_slowdown_snapshot(snap_compare):
    async def run_before(pilot) -> None:
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        await pilot.press("7")
        await pilot.pause()

    assert snap_compare(make_app(), terminal_size=(160, 48), run_before=run_before)
