"""The Timing tab: per rank where its step goes and a sparkline of its step times, the
straggler marked, through the real analysis; the verdict banner says who it is."""

from __future__ import annotations

import time

import pytest
from testkit.timing_fakes import healthy_job, slow_job
from testkit.tui_fakes import FakePoller
from textual.widgets import DataTable, Static

from mldebug.tui.app import AttachApp
from mldebug.tui.widgets.findings_banner import FindingsBanner
from mldebug.tui.widgets.timing_view import TimingView

SIZES = {"small": (80, 24), "large": (160, 48)}


def make_app(make=slow_job) -> AttachApp:
    return AttachApp(FakePoller(make), interval=3600, job_name="train.py — ranks 0-3 of 4")


async def test_the_timing_tab_marks_the_straggler_and_the_banner_names_it():
    app = make_app()
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        await pilot.press("7")  # the Timing tab's key
        await pilot.pause()
        assert app.query_one("#tabs").active == "timing"
        table = app.query_one("#timing-table", DataTable)
        first = [str(cell) for cell in table.get_row_at(0)]
        assert first[0] == "3" and first[-1] == "◀ straggler"
        assert len(first[-2]) > 10 and set(first[-2]) <= set("▁▂▃▄▅▆▇█")  # step times
        others = [str(table.get_row_at(i)[-1]) for i in range(1, table.row_count)]
        assert others == ["", "", ""]
        summary = str(app.query_one("#timing-summary", Static).render())
        assert "rank 3 is the straggler: it arrives last at" in summary
        banner = str(app.query_one(FindingsBanner).render())
        assert banner.startswith("▲ rank 3 is the straggler:")


async def test_a_healthy_job_marks_nobody():
    app = make_app(healthy_job)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        await pilot.press("7")
        await pilot.pause()
        table = app.query_one("#timing-table", DataTable)
        assert table.row_count == 4
        assert all(str(table.get_row_at(i)[-1]) == "" for i in range(4))
        summary = str(app.query_one(TimingView).query_one("#timing-summary", Static).render())
        assert "No rank keeps the others waiting." in summary


@pytest.fixture(autouse=True)
def utc(monkeypatch):
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def after_tab(key: str):
    async def run_before(pilot) -> None:
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        await pilot.press(key)
        await pilot.pause()

    return run_before


@pytest.mark.parametrize("size", SIZES)
def test_timing_tab_snapshot(snap_compare, size):
    assert snap_compare(make_app(), terminal_size=SIZES[size], run_before=after_tab("7"))
