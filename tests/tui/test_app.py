"""Pilot tests: drive the attach app with keys, fed by a fake poller, and read its widgets."""

from __future__ import annotations

import asyncio
import json
import os
import threading
from dataclasses import replace

import pytest
from testkit.tui_fakes import FIXED_TIME, FakePoller, Frame, hung_job
from textual.widgets import DataTable, Input, Log, TabbedContent, TabPane

from mldebug.commands.attach import live_app
from mldebug.live.sources import SourceLines
from mldebug.model import RankTarget, RankView, StackSample, ThreadStack
from mldebug.tui.screens.compare_screen import CompareScreen
from mldebug.tui.screens.quit_screen import QuitScreen
from mldebug.tui.screens.rank_screen import RankScreen
from mldebug.tui.widgets.findings_banner import FindingsBanner
from mldebug.tui.widgets.rank_detail import RankDetail
from mldebug.tui.widgets.rank_table import RankTable
from mldebug.tui.widgets.recipes_view import RecipesView
from mldebug.tui.widgets.stack_tree import StackTree

SLOW_TIMER = 3600  # the timer never fires in a test: polls are requested explicitly


async def settle(app, pilot) -> None:
    """Wait until the poll in flight (if any) has been drawn."""
    await app.workers.wait_for_complete()
    await pilot.pause()


async def wait_until(pilot, condition, attempts: int = 200) -> None:
    """For work done in a plain thread: let the app run until `condition()` holds."""
    for _ in range(attempts):
        if condition():
            return
        await pilot.pause(0.05)
    raise AssertionError("condition never held")


def table_rows(table: DataTable) -> list[list[str]]:
    return [[str(cell) for cell in table.get_row_at(i)] for i in range(table.row_count)]


def tree_labels(tree: StackTree) -> list[str]:
    labels = []

    def walk(node):
        labels.append(str(node.label))
        for child in node.children:
            walk(child)

    walk(tree.root)
    return labels


async def test_overview_shows_every_rank_the_verdict_and_the_merged_tree(poller):
    app = live_app(poller, interval=SLOW_TIMER)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        rows = table_rows(app.query_one(RankTable))
        assert [row[0] for row in rows] == ["0", "1", "2", "3"]
        assert rows[1][1:4] == ["running", "train.py:31 slow_data_loading", "-"]
        assert rows[0][1:4] == ["stuck", "train.py:48 train", "all_reduce"]
        assert rows[0][4:6] == ["0", "512.0M"]  # cpu% and memory; nothing shown as unknown
        banner = " ".join(str(app.query_one(FindingsBanner).render()).split())
        assert (
            "rank 1 never reached all_reduce: it is busy in slow_data_loading "
            "(/job/train.py:31), while ranks 0,2-3 wait in all_reduce at train "
            "(/job/train.py:48) recipe: rank-outside-collective" in banner
        )
        labels = tree_labels(app.query_one(StackTree))
        assert any("slow_data_loading" in label and "[1]" in label for label in labels)
        assert any("all_reduce" in label and "[0,2-3] (3)" in label for label in labels)
        await pilot.pause()  # the cursor starts on the odd rank's frame, so it is on screen
        assert "ranks at slow_data_loading" in str(app.query_one("#node-ranks").render())


async def test_selecting_a_tree_node_names_its_ranks(poller):
    app = live_app(poller, interval=SLOW_TIMER)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        tree = app.query_one(StackTree)
        tree.focus()
        target = next(
            i
            for i in range(tree.last_line + 1)
            if "slow_data_loading" in str(tree.get_node_at_line(i).label)
        )
        tree.move_cursor(tree.get_node_at_line(target))
        await pilot.pause()
        assert "ranks at slow_data_loading" in str(app.query_one("#node-ranks").render())
        assert str(app.query_one("#node-ranks").render()).endswith(": 1  (1)")


async def test_enter_opens_the_rank_with_every_thread_and_its_source_line(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("import time\n\ndef stall():\n    time.sleep(3600)  # the culprit\n")
    frames = (Frame("<module>", str(script), 1), Frame("stall", str(script), 4))

    def make(tick):
        job = hung_job(2)
        view = job.ranks[1]
        threads = (ThreadStack(1, "MainThread", frames), *view.threads[1:])
        changed = RankView(view.rank, view.target, view.state, threads, frames[-1])
        return type(job)(job.time, (job.ranks[0], changed), tree=job.tree)

    app = live_app(FakePoller(make), interval=SLOW_TIMER)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(app, pilot)
        await pilot.press("down", "enter")
        assert isinstance(app.screen, RankScreen) and app.screen.rank == 1
        detail = app.screen.query_one(RankDetail)
        # The source line is read off the UI thread, and drawn once it is there.
        await wait_until(pilot, lambda: "time.sleep(3600)  # the culprit" in detail.text)
        text = detail.text
        assert f"→ stall  {script}:4" in text
        assert 'Thread 2001 "Thread-2 (_pin_memory_loop)"' in text
        # WHEN the file changes while it is on screen, THEN the next refresh shows the new line
        script.write_text("import time\n\ndef stall():\n    time.sleep(7200)  # edited\n")
        detail.show(app.snapshot.ranks[1])
        await wait_until(pilot, lambda: "time.sleep(7200)  # edited" in detail.text)
        await pilot.press("escape")
        assert not isinstance(app.screen, RankScreen)


async def test_a_source_file_that_takes_forever_to_read_never_holds_the_ui(tmp_path, monkeypatch):
    # GIVEN a source file whose read blocks (a hung network filesystem)
    stuck, reads = threading.Event(), []

    def refresh(self, paths):
        reads.append(list(paths))
        stuck.wait(30)
        return False

    monkeypatch.setattr(SourceLines, "refresh", refresh)
    app = live_app(FakePoller(), interval=SLOW_TIMER)
    try:
        async with app.run_test(size=(100, 30)) as pilot:
            await settle(app, pilot)
            # WHEN a rank's detail opens, THEN it is drawn and keys still work
            await pilot.press("enter")
            assert isinstance(app.screen, RankScreen)
            await wait_until(pilot, lambda: bool(reads))
            assert "train" in app.screen.query_one(RankDetail).text
            await pilot.press("escape")
            assert not isinstance(app.screen, RankScreen)
    finally:
        stuck.set()


async def test_native_frames_are_read_on_demand_for_the_rank_on_screen(poller):
    app = live_app(poller, interval=SLOW_TIMER)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(app, pilot)
        await pilot.press("enter")  # rank 0, waiting in all_reduce over gloo
        detail = app.screen.query_one(RankDetail)
        assert "gloo::AllreduceRing::run" not in detail.text
        assert "1 native frames hidden" in detail.text
        await pilot.press("n")
        await wait_until(pilot, lambda: "native frames as read" in detail.text)
        assert "gloo::AllreduceRing::run  libgloo.so" in detail.text
        assert "native frames as read at" in detail.text
        assert poller.native_requests == [0]  # one reading, of the rank on screen only
        await pilot.press("n")
        assert "gloo::AllreduceRing::run" not in detail.text


async def test_a_native_reading_that_fails_keeps_the_python_stack(poller):
    app = live_app(poller, interval=SLOW_TIMER)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(app, pilot)
        await pilot.press("enter")
        poller.read_native = lambda rank: StackSample(
            RankTarget(pid=1),
            FIXED_TIME,
            failure="timeout",
            failure_detail="py-spy did not answer within 60s",
        )
        await pilot.press("n")
        detail = app.screen.query_one(RankDetail)
        await wait_until(pilot, lambda: "could not be read" in detail.text)
        text = detail.text
        assert "native frames could not be read: py-spy did not answer within 60s" in text
        assert "all_reduce  /venv/lib/python3.11/site-packages/torch/distributed/" in text


async def test_compare_shows_two_ranks_side_by_side(poller):
    app = live_app(poller, interval=SLOW_TIMER)
    async with app.run_test(size=(140, 40)) as pilot:
        await settle(app, pilot)
        await pilot.press("enter", "c")
        await pilot.press("1", "enter")
        assert isinstance(app.screen, CompareScreen)
        left = app.screen.query_one("#compare-left", RankDetail).text
        right = app.screen.query_one("#compare-right", RankDetail).text
        assert left.startswith("rank 0") and "all_reduce" in left
        assert right.startswith("rank 1") and "slow_data_loading" in right


async def test_compare_prompt_rejects_what_is_not_a_rank(poller):
    app = live_app(poller, interval=SLOW_TIMER)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(app, pilot)
        await pilot.press("enter", "c", "x", "enter")
        assert "A rank is a number" in str(app.screen.query_one("#rank-error").render())
        await pilot.press("escape")
        assert isinstance(app.screen, RankScreen)


async def test_filter_by_rank_set_and_by_text(poller):
    app = live_app(poller, interval=SLOW_TIMER)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        table = app.query_one(RankTable)
        await pilot.press("slash", "2", "-", "3")
        assert table.shown_ranks == [2, 3]
        await pilot.press("escape")  # back to the table, the filter stays
        assert app.focused is table and table.shown_ranks == [2, 3]
        app.query_one("#rank-filter", Input).value = "slow_data"
        await pilot.pause()
        assert table.shown_ranks == [1]
        app.query_one("#rank-filter", Input).value = ""
        await pilot.pause()
        assert table.shown_ranks == [0, 1, 2, 3]


async def test_pause_stops_polling_and_resume_polls_at_once(poller):
    app = live_app(poller, interval=SLOW_TIMER)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(app, pilot)
        assert poller.calls == 1
        await pilot.press("p")
        assert "PAUSED" in str(app.query_one("#status").render())
        app.request_poll()  # what the timer does
        await settle(app, pilot)
        assert poller.calls == 1
        await pilot.press("p")
        await settle(app, pilot)
        assert poller.calls == 2
        assert "LIVE" in str(app.query_one("#status").render())


async def test_a_stuck_poll_never_piles_up_and_the_ui_stays_usable(poller):
    app = live_app(poller, interval=SLOW_TIMER)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(app, pilot)
        poller.gate.clear()  # the next poll hangs, like py-spy on a frozen rank
        for _ in range(5):
            app.request_poll()
        await pilot.pause()
        running = [w for w in app.workers if w.group == "poll" and not w.is_finished]
        assert len(running) == 1
        await pilot.press("3")  # the UI still answers keys
        assert app.query_one(TabbedContent).active == "memory"
        poller.gate.set()
        await settle(app, pilot)
        assert poller.calls == 2 and app.polls == 2


async def test_a_failing_poll_is_reported_and_the_next_one_recovers(poller):
    app = live_app(poller, interval=SLOW_TIMER)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(app, pilot)
        poller.fail_next = RuntimeError("py-spy vanished")
        app.request_poll()
        await settle(app, pilot)
        assert "poll failed: RuntimeError: py-spy vanished" in str(
            app.query_one("#status").render()
        )
        assert app.query_one(RankTable).row_count == 4  # the last good view stays
        app.request_poll()
        await settle(app, pilot)
        assert "poll failed" not in str(app.query_one("#status").render())


async def test_a_rank_that_exits_is_shown_as_exited_and_the_app_goes_on():
    poller = FakePoller(lambda tick: hung_job(4, exited=(3,) if tick else ()))
    app = live_app(poller, interval=SLOW_TIMER)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        table = app.query_one(RankTable)
        assert str(table.get_row("3")[1]) == "stuck"
        app.request_poll()
        await settle(app, pilot)
        assert str(table.get_row("3")[1]) == "exited 1"
        assert "1 exited" in str(app.query_one("#status").render())


def rendered(table: DataTable) -> str:
    """The table as drawn on screen (cells cut to their column's width)."""
    return "\n".join(table.render_line(y).text for y in range(table.size.height))


async def test_a_cell_that_outgrows_its_column_is_drawn_whole():
    # GIVEN a job where rank 3 is stuck and no rank's memory is known yet
    def make(tick: int):
        job = hung_job(4)
        changed = {
            2: {"rss_bytes": 3 * 2**30},
            3: {"state": "exited", "exit_code": 137, "threads": ()} if tick else {},
        }
        return replace(
            job,
            ranks=tuple(
                replace(v, **changed.get(v.rank, {})) if tick else replace(v, rss_bytes=None)
                for v in job.ranks
            ),
        )

    app = live_app(FakePoller(make), interval=SLOW_TIMER)
    async with app.run_test(size=(160, 40)) as pilot:
        await settle(app, pilot)
        # WHEN the next poll has rank 3 exited with code 137, and every rank's memory
        app.request_poll()
        await settle(app, pilot)
        await pilot.pause()  # drawn
        # THEN both are drawn whole, not cut to the width the column had
        table = rendered(app.query_one(RankTable))
        assert "exited 137" in table and "512.0M" in table
        await pilot.press("3")
        await pilot.pause()
        memory = rendered(app.query_one("#memory-table", DataTable))
        assert memory.splitlines()[3].split()[:3] == ["2", "3.0G", "3.0G"]  # rank, rss, peak


async def test_256_ranks_update_only_the_cells_that_changed():
    poller = FakePoller(lambda tick: hung_job(256, outlier=7 + tick))
    app = live_app(poller, interval=SLOW_TIMER)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(app, pilot)
        table = app.query_one(RankTable)
        assert table.row_count == 256
        before = table.cells_updated
        app.request_poll()  # rank 7 goes back to all_reduce, rank 8 leaves it
        await settle(app, pilot)
        changed = table.cells_updated - before
        assert 0 < changed <= 2 * 5  # two rows, a few columns each: no rebuild
        assert str(table.get_row("8")[2]) == "train.py:31 slow_data_loading"
        labels = tree_labels(app.query_one(StackTree))
        assert any("slow_data_loading" in label and "[8]" in label for label in labels)
        assert len(labels) < 12  # merged: one branch per distinct stack, not per rank


async def test_a_poll_that_changes_every_rank_is_one_repaint_of_the_table():
    # GIVEN 256 ranks whose CPU and memory cells all change at each poll (their agents beat)
    poller = FakePoller(lambda tick: hung_job(256, tick=tick))
    app = live_app(poller, interval=SLOW_TIMER)
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(app, pilot)
        table = app.query_one(RankTable)
        cells, repaints = table.cells_updated, table.repaints
        # WHEN the next poll comes
        app.request_poll()
        await settle(app, pilot)
        await pilot.pause()  # drawn
        # THEN every changed cell is sent, and the table asks for one repaint, not one a cell
        assert table.cells_updated - cells >= 256
        assert table.repaints - repaints == 1
        assert str(table.get_row("255")[0]) == "255"
        rows = {line.split()[0] for line in rendered(table).splitlines()[1:] if line.strip()}
        assert "0" in rows  # and what is on screen is drawn


async def test_r_opens_the_recipe_the_finding_points_to(poller):
    app = live_app(poller, interval=SLOW_TIMER)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(app, pilot)
        await pilot.press("r")
        assert app.query_one(TabbedContent).active == "recipes"
        assert app.query_one(RecipesView).current == "rank-outside-collective"


async def test_keys_help_and_command_palette_open(poller):
    app = live_app(poller, interval=SLOW_TIMER)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(app, pilot)
        await pilot.press("question_mark")
        assert app.screen.query("HelpPanel")
        await pilot.press("question_mark")
        assert not app.screen.query("HelpPanel")
        await pilot.press("ctrl+p")
        await pilot.pause()
        assert type(app.screen).__name__ == "CommandPalette"


@pytest.fixture
def run_dir(tmp_path):
    root = tmp_path / "run"
    for rank in range(4):
        folder = root / "ranks" / str(rank)
        folder.mkdir(parents=True)
        (folder / "stdout.log").write_text(
            "".join(f"step {step} loss {1.0 / (step + 1):.3f}\n" for step in range(50))
        )
        (folder / "stderr.log").write_text(f"rank {rank}: warning: slow disk\n")
    (root / "ranks" / "2" / "events.jsonl").write_text(
        json.dumps(
            {
                "time": 1767225600.0,
                "kind": "nan",
                "message": "NaN in loss",
                "location": "/job/train.py:52",
            }
        )
        + "\nnot json\n"
    )
    (root / "nccl").mkdir()
    (root / "nccl" / "node0.4242.log").write_text("node0:4242:4242 [0] NCCL INFO Bootstrap\n")
    return root


async def test_logs_tab_shows_rank_output_and_filters_it(poller, run_dir):
    app = live_app(poller, interval=SLOW_TIMER, run_dir=run_dir)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        await pilot.press("5")
        log = app.query_one("#logs-text", Log)
        assert "[0]  step 0 loss 1.000" in log.lines
        assert "[3]! rank 3: warning: slow disk" in log.lines
        app.query_one("#logs-ranks", Input).value = "2"
        app.query_one("#logs-search", Input).value = "WARNING"
        await pilot.pause()
        assert log.lines == ["[2]! rank 2: warning: slow disk"]


async def test_anomalies_and_nccl_tabs_read_the_run_directory(poller, run_dir):
    app = live_app(poller, interval=SLOW_TIMER, run_dir=run_dir)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        events = app.query_one("#events-table", DataTable)
        assert table_rows(events)[0][1:] == ["2", "nan", "NaN in loss", "/job/train.py:52"]
        assert "1 lines were not JSON" in str(app.query_one("#events-note").render())
        findings = table_rows(app.query_one("#findings-table", DataTable))
        assert findings[0][:3] == ["error", "outlier", "1"]
        assert app.query_one("#nccl-tail", Log).lines == ["node0:4242:4242 [0] NCCL INFO Bootstrap"]


async def test_events_with_times_no_clock_can_show_leave_the_view_working(poller, tmp_path):
    # GIVEN an events.jsonl whose "time" values are valid JSON but no time of day
    folder = tmp_path / "run" / "ranks" / "0"
    folder.mkdir(parents=True)
    lines = [
        '{"time": 1' + "0" * 400 + ', "kind": "nan", "message": "huge integer"}',
        '{"time": 1e400, "kind": "nan", "message": "infinite"}',
        '{"time": NaN, "kind": "nan", "message": "not a number"}',
        '{"time": 1e300, "kind": "nan", "message": "year out of range"}',
    ]
    (folder / "events.jsonl").write_text("\n".join(lines) + "\n")
    app = live_app(poller, interval=SLOW_TIMER, run_dir=tmp_path / "run")
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        # THEN the poll is drawn (not failed) and every event is listed, without a time
        assert app.last_error == ""
        assert table_rows(app.query_one(RankTable))[0][0] == "0"
        events = table_rows(app.query_one("#events-table", DataTable))
        assert sorted(row[3] for row in events) == sorted(
            ["huge integer", "infinite", "not a number", "year out of range"]
        )
        assert {row[0] for row in events} == {"-"}


async def test_the_events_table_keeps_up_once_the_newest_500_are_shown(poller, tmp_path):
    # GIVEN a rank that has written as many events as the tab keeps
    from mldebug.live.runfiles import MAX_EVENTS

    events_file = tmp_path / "run" / "ranks" / "0" / "events.jsonl"
    events_file.parent.mkdir(parents=True)

    def event(index: int) -> str:
        return (
            json.dumps(
                {"time": FIXED_TIME + index, "kind": "loss_spike", "message": f"event {index}"}
            )
            + "\n"
        )

    events_file.write_text("".join(event(i) for i in range(MAX_EVENTS)))
    app = live_app(poller, interval=SLOW_TIMER, run_dir=tmp_path / "run")
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        table = app.query_one("#events-table", DataTable)
        assert table_rows(table)[-1][3] == f"event {MAX_EVENTS - 1}"
        # WHEN one more is written
        with open(events_file, "a") as handle:
            handle.write(event(MAX_EVENTS))
        app.request_poll()
        await settle(app, pilot)
        # THEN it is shown, the oldest gone
        rows = table_rows(table)
        assert len(rows) == MAX_EVENTS
        assert rows[-1][3] == f"event {MAX_EVENTS}" and rows[0][3] == "event 1"


async def test_without_a_run_directory_the_tabs_say_what_would_be_there(poller):
    app = live_app(poller, interval=SLOW_TIMER)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        assert "Not attached to an `mldebug run` directory" in str(
            app.query_one("#events-note").render()
        )
        # No promise of figures nothing reads: host memory is what is shown, and said so.
        assert "GPU memory is not read" in str(app.query_one("#memory-note").render())


async def test_quit_after_launch_offers_to_stop_the_job(poller):
    stopped = []
    app = live_app(poller, interval=SLOW_TIMER, stop=lambda: stopped.append(True))
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(app, pilot)
        await pilot.press("q")
        assert isinstance(app.screen, QuitScreen)
        await pilot.press("escape")
        assert not isinstance(app.screen, QuitScreen) and not stopped
        await pilot.press("q", "s")
    assert stopped == [True]
    assert app.return_code == 0


async def test_quit_can_leave_the_launched_job_running(poller):
    stopped = []
    app = live_app(poller, interval=SLOW_TIMER, stop=lambda: stopped.append(True))
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(app, pilot)
        await pilot.press("q", "d")
    assert stopped == [] and poller.closed


async def test_q_quits_at_once_when_attached_to_a_job_it_did_not_start(poller):
    app = live_app(poller, interval=SLOW_TIMER)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(app, pilot)
        await pilot.press("q")
        await pilot.pause()
    assert app.return_code == 0 and poller.closed


class StuckPoller(FakePoller):
    """A poll that hangs on a read nothing can interrupt (a FIFO, a frozen rank): closing
    the poller does not release it."""

    def __init__(self) -> None:
        super().__init__()
        self.stuck = threading.Event()
        self.entered = threading.Event()
        self.poll_thread: threading.Thread | None = None

    def poll(self):
        if self.calls:
            self.poll_thread = threading.current_thread()
            self.entered.set()
            self.stuck.wait()
        return super().poll()

    def close(self) -> None:
        self.closed = True


async def test_q_quits_at_once_while_a_poll_is_stuck():
    poller = StuckPoller()
    # The read is released only after a minute (so a failing run ends, not hangs): an app
    # that waited for it would quit after that, with the read no longer stuck.
    release = threading.Timer(60, poller.stuck.set)
    release.start()
    try:
        app = live_app(poller, interval=SLOW_TIMER)
        async with app.run_test(size=(100, 30)) as pilot:
            await settle(app, pilot)
            app.request_poll()
            await wait_until(pilot, poller.entered.is_set)
            await pilot.press("q")
        assert app.return_code == 0 and poller.closed
        assert not poller.stuck.is_set()  # it quit while the read was still stuck
        # Nothing waits for the stuck read: not the app's thread pool (joined when its loop
        # closes, as `mldebug attach` does on quit), not the interpreter at exit.
        await asyncio.wait_for(asyncio.get_running_loop().shutdown_default_executor(), 30)
        assert not poller.stuck.is_set()
        assert poller.poll_thread.daemon and poller.poll_thread.is_alive()
    finally:
        poller.stuck.set()
        release.cancel()


async def test_s_saves_the_report_in_the_run_directory_and_says_where(poller, run_dir):
    app = live_app(poller, interval=SLOW_TIMER, run_dir=run_dir)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        await pilot.press("s", "s")  # twice in the same second: two reports, none lost
        await wait_until(pilot, lambda: len(list((run_dir / "reports").glob("*.json"))) == 2)
        await wait_until(pilot, lambda: "saved " in str(app.query_one("#status").render()))
        texts = sorted((run_dir / "reports").glob("*.txt"))
        jsons = sorted((run_dir / "reports").glob("*.json"))
        assert len(texts) == 2 and len(jsons) == 2
        assert "rank 1 never reached all_reduce" in texts[0].read_text()
        data = json.loads(jsons[0].read_text())
        assert data["findings"][0]["recipe"] == "rank-outside-collective"
        assert "saved " + str(run_dir / "reports") in str(app.query_one("#status").render())


async def test_without_a_run_directory_the_report_goes_to_the_current_directory(
    poller, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    app = live_app(poller, interval=SLOW_TIMER)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        await pilot.press("s")
        await wait_until(pilot, lambda: app.last_report != "")
    assert len(list(tmp_path.glob("mldebug-attach-*.txt"))) == 1
    assert len(list(tmp_path.glob("mldebug-attach-*.json"))) == 1


async def test_the_ui_answers_keys_while_a_1024_rank_report_is_written(run_dir, monkeypatch):
    # GIVEN a 1,024-rank job, and a report write that waits until the test lets it go
    import mldebug.tui.app as app_module

    real_write, go, started = app_module.write_report, threading.Event(), threading.Event()

    def slow_write(*args):
        started.set()
        assert go.wait(30)
        return real_write(*args)

    monkeypatch.setattr(app_module, "write_report", slow_write)
    app = live_app(FakePoller(world_size=1024), interval=SLOW_TIMER, run_dir=run_dir)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        # WHEN s is pressed, THEN the write runs elsewhere while the UI takes keys
        await pilot.press("s")
        await wait_until(pilot, started.is_set)
        await pilot.press("3")
        assert app.query_one(TabbedContent).active == "memory"
        go.set()
        await wait_until(pilot, lambda: app.last_report != "", attempts=600)
    (report,) = (run_dir / "reports").glob("*.txt")
    assert "rank 1023" in report.read_text()  # every rank's threads, the last one too


async def test_recipes_can_be_browsed_with_the_keyboard(poller):
    app = live_app(poller, interval=SLOW_TIMER)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(app, pilot)
        await pilot.press("6")
        view = app.query_one(RecipesView)
        first = view.current
        await pilot.press("down")
        await pilot.pause()
        assert view.current not in (None, first)
        assert view.current == view.recipes[1].id


async def test_enter_on_a_finding_opens_its_recipe(poller):
    app = live_app(poller, interval=SLOW_TIMER)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        await pilot.press("2", "enter")
        assert app.query_one(TabbedContent).active == "recipes"
        assert app.query_one(RecipesView).current == "rank-outside-collective"


async def test_a_report_on_another_users_run_goes_to_the_current_directory(
    poller, run_dir, tmp_path, monkeypatch
):
    # GIVEN a run directory that belongs to another user (mldebug runs as root here)
    os.chown(run_dir, 65534, 65534)
    cwd = tmp_path / "here"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    app = live_app(poller, interval=SLOW_TIMER, run_dir=run_dir)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        # WHEN s saves a report, THEN nothing of root's is made inside that user's run
        await pilot.press("s")
        await wait_until(pilot, lambda: app.last_report != "")
    assert not (run_dir / "reports").exists()
    assert len(list(cwd.glob("mldebug-attach-*.txt"))) == 1


async def test_the_ranks_on_a_detail_screen_are_focused_while_it_is_shown(poller):
    app = live_app(poller, interval=SLOW_TIMER)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        # WHEN rank 1's detail opens, then a comparison with rank 3, then both close
        await pilot.press("down", "enter")
        await pilot.pause()
        await pilot.press("c", "3", "enter")
        await pilot.pause()
        await pilot.press("escape")
        await pilot.pause()
        await pilot.press("escape")
        await pilot.pause()
    # THEN the poller was told which ranks were looked at, and when none was any more
    # (the prompt that asks which rank to compare with keeps rank 1 focused meanwhile)
    assert poller.focused == [(1,), (1,), (1, 3), (1,), ()]


async def test_mldebugs_own_collective_wrapper_folds_like_a_library_frame():
    # GIVEN a job traced by mldebug's agent: between the user's average_gradients and
    # torch's all_reduce sits the agent's wrapper (mldebug/agent/collectives.py), as in
    # `mldebug demo`; the real analysis builds the snapshot
    from testkit.tui_fakes import C10D, LOGGER, MAIN, SCRIPT, TRAIN, samples_of

    import mldebug.agent.collectives as collectives
    from mldebug.analysis.snapshot import build_snapshot
    from mldebug.model import Frame, RankTarget

    average = Frame("average_gradients", SCRIPT, 33)
    ours = Frame("_traced.<locals>.wrapper", collectives.__file__, 475)
    waiting = (
        MAIN,
        TRAIN,
        average,
        ours,
        Frame("wrapper", LOGGER, 81),
        Frame("all_reduce", C10D, 2806),
    )
    outlier = (MAIN, TRAIN, Frame("next_batch", SCRIPT, 20))

    def make(tick):
        targets = [RankTarget(pid=100 + r, rank=r, world_size=3) for r in range(3)]
        samples = {
            t.pid: samples_of(t, outlier if t.rank == 1 else waiting, t.rank == 1, 1 << 20, tick)
            for t in targets
        }
        return build_snapshot(targets, samples, world_size=3, now=FIXED_TIME + 1)

    app = live_app(FakePoller(make), interval=SLOW_TIMER)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        labels = tree_labels(app.query_one(StackTree))
        # THEN the tree goes from the user's line straight to torch's collective, the two
        # wrappers folded and counted, as the text report shows it
        assert not any("collectives.py" in label for label in labels), labels
        assert any(
            label.startswith("(2 library frames) all_reduce") and "[0,2]" in label
            for label in labels
        ), labels
        assert any(label.startswith("average_gradients") for label in labels), labels


async def test_a_quick_second_tab_key_is_not_undone_by_the_first_tabs_focus(poller):
    # GIVEN a widget of the NCCL tab taking the focus (what pressing "4" or a click does) and
    # the user's "5" handled before that focus has reached the tab pane: the order a loaded
    # machine gives
    app = live_app(poller, interval=SLOW_TIMER)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(app, pilot)
        await pilot.press("4")
        app.action_tab("logs")
        # WHEN the NCCL pane's news that a widget in it took the focus arrives only now
        nccl = app.query_one("#nccl", TabPane)
        nccl.post_message(TabPane.Focused(nccl))
        for _ in range(3):
            await pilot.pause()
        # THEN the user stays on the tab they asked for last
        assert app.query_one(TabbedContent).active == "logs"
