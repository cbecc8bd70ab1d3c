"""The live view's NCCL tab, through the real run-files reader and the real NCCL parser.

The run directory holds NCCL logs of 4 ranks, one of them on sockets (tests/data/nccl/
transport, assembled from NCCL 2.18's documented format), and the ranks' stderr with the
torch 2.4 watchdog's messages (tests/data/nccl/watchdog_2.4). The job's stacks come from
the TUI tests' fake poller (no GPU, no job here); the app, the reader and the parser are
the real ones, driven with Pilot.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

from testkit.tui_fakes import FakePoller
from textual.widgets import Log, Static

from mldebug.commands.attach import live_app

DATA = Path(__file__).parent / "data" / "nccl"


def make_run(root: Path) -> Path:
    shutil.copytree(DATA / "watchdog_2.4" / "ranks", root / "ranks")
    (root / "nccl").mkdir()
    for log in sorted((DATA / "transport").iterdir()):
        shutil.copy(log, root / "nccl" / log.name)
    return root


def test_the_nccl_tab_shows_the_findings_and_each_ranks_summary(tmp_path):
    run = make_run(tmp_path / "run")

    async def drive():
        app = live_app(FakePoller(), interval=3600, run_dir=run)
        async with app.run_test(size=(140, 45)) as pilot:
            await app.workers.wait_for_complete()
            await pilot.pause()
            await pilot.press("4")  # the NCCL tab
            await pilot.pause()
            report = str(app.query_one("#nccl-report", Static).render())
            note = str(app.query_one("#nccl-note", Static).render())
            tail = app.query_one("#nccl-tail", Log).lines
            return report, note, tail

    report, note, tail = asyncio.run(drive())
    # The watchdog's timeouts, compared by SeqNum, name rank 2; the transport, rank 3.
    assert "✖ rank 2 never called all_reduce #57; ranks 0-1,3 timed out in it" in report
    assert "recipe: rank-outside-collective" in report  # a rank behind, whoever saw it
    assert "✖ rank 3 uses another NCCL network than the rest" in report
    assert "network Socket via eth0" in report  # rank 3's summary
    assert note.startswith("4 NCCL log files; findings name ranks 2-3")
    assert tail[0] == "gpu-a:4100:4100 [0] NCCL INFO Bootstrap : Using ib0:10.1.0.1<0>"
