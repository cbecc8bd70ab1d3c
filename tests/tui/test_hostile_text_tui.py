"""The live view shows hostile text from ranks and files as written, and never obeys it.

The job comes from the real analysis (tests/test_hostile_text.py's `hostile_job`); the run
directory is real too, read by the app's own RunFilesReader: rank logs, agent events, an
NCCL log and an error.json carrying the hostile text, in a directory whose name carries it.
Every screen is drawn and read back as the terminal would get it.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from testkit.hostile import CONTROLS, HOSTILE, hostile_job, hostile_text, user_file
from testkit.tui_fakes import FIXED_TIME, FakePoller
from textual.widgets import Input

from mldebug.analysis.frames import is_library_file
from mldebug.commands.attach import live_app
from mldebug.live.sources import SourceLines
from mldebug.tui.screens.compare_screen import CompareScreen
from mldebug.tui.screens.rank_screen import RankScreen

SIZE = (400, 60)  # wide enough that no checked text is cut
SLOW_TIMER = 3600


def screen_text(app) -> str:
    """What the current screen draws, as text: every cell of every line."""
    strips = app.screen._compositor.render_strips()
    return "\n".join("".join(segment.text for segment in strip) for strip in strips)


async def see(pilot, app, *needles: str) -> str:
    """The screen once it shows every needle (a few refreshes may be needed on a busy
    machine); no control character may be drawn, and every needle must be there."""
    for _ in range(300):  # 15 s at most: a loaded machine may take seconds to switch tabs
        text = screen_text(app)
        if all(needle in text for needle in needles):
            break
        await pilot.pause(0.05)
    found = sorted({repr(c) for c in CONTROLS if c in text})
    assert not found, f"control characters reached the screen: {found}"
    for needle in needles:
        assert needle in text, f"{needle!r} is not on screen:\n{text}"
    return text


def file_name(text: str) -> str:
    """`text` as it can be part of a file name."""
    return text.replace("/", "").replace("\x00", "")


def hostile_run(tmp_path: Path, text: str) -> Path:
    """A run directory named after `text`, whose logs, events and NCCL file carry it."""
    root = tmp_path / f"run {file_name(text)}"
    for rank in (0, 1):
        folder = root / "ranks" / str(rank)
        folder.mkdir(parents=True)
        (folder / "stdout.log").write_text(f"step 1 {text}\n")
        (folder / "stderr.log").write_text(f"warn {text}\n")
    event = {"time": FIXED_TIME, "kind": f"nan {text}", "message": f"NaN in {text}"}
    (root / "ranks" / "1" / "events.jsonl").write_text(json.dumps(event) + "\n")
    (root / "nccl").mkdir()
    (root / "nccl" / f"node {file_name(text)}.log").write_text(f"NCCL INFO {text}\n")
    return root


async def settle(app, pilot) -> None:
    await app.workers.wait_for_complete()
    await pilot.pause()


async def walk_every_view(tmp_path: Path, text: str, visible: str) -> None:
    # GIVEN a job whose every string carries `text`, attached through its run directory
    run_dir = hostile_run(tmp_path, text)
    snapshot = hostile_job(text, run_dir)
    poller = FakePoller(lambda tick: snapshot)
    app = live_app(poller, interval=SLOW_TIMER, run_dir=run_dir, job_name=str(run_dir))
    # Logs keep what a terminal shows of a line rewritten with \r (a progress bar).
    rewritten = "\r" in text

    def logged(prefix: str) -> str:
        return text.rsplit("\r", 1)[-1] if rewritten else prefix + visible

    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await settle(app, pilot)
        # THEN the overview shows it in the table, the banner, the tree and the title
        where = os.path.basename(user_file(visible))
        await see(
            pilot,
            app,
            f"node {visible}",  # host column
            f"{where}:12 {visible}",  # current frame column
            f"rank 2 failed first: {visible}Error: no shard at {visible}",  # banner
            f"{visible}  {where}:12",  # tree
            f"run {file_name(visible)}",  # header: the job's name
        )
        await see(pilot, app, f"ranks at {visible} (")  # the tree's cursor line
        # AND the rank's detail and a comparison with the rank that could not be read
        await pilot.press("enter")
        assert isinstance(app.screen, RankScreen) and app.screen.rank == 0
        await see(
            pilot,
            app,
            f'"main {visible}"',
            f"→ {visible}  {user_file(visible)}:12",
            f"on node {visible}",
        )
        await pilot.press("c", "3", "enter")
        assert isinstance(app.screen, CompareScreen)
        await see(pilot, app, f'"main {visible}"', f"py-spy: {visible}")
        await pilot.press("escape", "escape")
        # AND the Anomalies, NCCL and Logs tabs, read from the files
        await pilot.press("2")
        await see(
            pilot, app, f"nan {visible}", f"NaN in {visible}", f"failed first: {visible}Error"
        )
        await pilot.press("4")
        await see(pilot, app, f"node {file_name(visible)}.log", logged("NCCL INFO "))
        await pilot.press("5")
        await see(
            pilot, app, f"[0]  {logged('step 1 ')}", f"[1]! {logged('warn ')}", "[N]! marks stderr"
        )
        app.query_one("#logs-ranks", Input).value = "[/]"
        await pilot.pause()
        await see(pilot, app, "'[/]' is not a rank set")
        # AND a failed poll, and a saved report named after the run directory, are told plainly
        poller.fail_next = RuntimeError(text)
        app.request_poll()
        await settle(app, pilot)
        await see(pilot, app, f"poll failed: RuntimeError: {visible}")
        await pilot.press("s")
        await see(pilot, app, "Snapshot saved", f"run {file_name(visible)}/reports/mldebug-attach-")
        assert app.is_running  # nothing took the view down


# One of each kind (each case starts the app: the report test takes every named string).
TUI_CASES = (
    "closing tag that is a path",  # MarkupError: the view died
    "link",  # markup obeyed: the words vanished
    "textual action",  # a Textual action link
    "clear screen",
    "hyperlink",
    "8-bit CSI",
    "NUL and bell",
    "carriage return",
    "bidi override",
)


@pytest.mark.parametrize("name", TUI_CASES)
async def test_named_hostile_strings_are_drawn_as_written_on_every_view(tmp_path, name):
    text, visible = HOSTILE[name]
    await walk_every_view(tmp_path, text, visible)


@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=hostile_text())
def test_any_mix_of_markup_and_control_sequences_is_drawn_as_plain_text(tmp_path_factory, case):
    import asyncio

    text, visible = case
    assume(not is_library_file(user_file(text)) and "\r" not in text)
    asyncio.run(walk_every_view(tmp_path_factory.mktemp("hyp"), text, visible))


def test_a_frame_file_that_is_a_fifo_or_holds_a_nul_shows_no_source_and_never_blocks(tmp_path):
    # GIVEN a rank whose frame names a FIFO as its file (reading it would wait for a writer)
    fifo = tmp_path / "train.py"
    os.mkfifo(fifo)
    sources = SourceLines()
    nul = "/job/a\x00b.py"
    reader = threading.Thread(target=sources.refresh, args=([str(fifo), nul],), daemon=True)
    reader.start()
    reader.join(5)
    if reader.is_alive():  # let the blocked reader go before failing
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    # THEN the detail shows no source line, at once; a NUL in the path is no error either
    assert not reader.is_alive()
    assert sources.line(str(fifo), 1) == ""
    assert sources.line(nul, 1) == ""
