"""Every thread of one rank from gdb (`g` on a rank's screen), read off the UI thread.

gdb takes seconds on a process that loaded libtorch (docs/gdb.md has the figures), so the
screen opens at once with a line that says it is reading, and a daemon thread asks the
poller; the threads appear when the reading arrives. Escape goes back at any time.
"""

from __future__ import annotations

import threading

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Static

from mldebug.report.native import dump_text
from mldebug.tui.messages import ThreadsReady
from mldebug.tui.screens.native_frames import live_app


class AllThreadsScreen(Screen):
    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("g", "reread", "Read again"),
    ]

    def __init__(self, rank: int) -> None:
        super().__init__()
        self.rank = rank
        self.reading = False

    def compose(self) -> ComposeResult:
        yield Static(f"Rank {self.rank}: every thread, native frames (gdb)", classes="screen-title")
        with VerticalScroll(id="all-threads"):
            yield Static(Text(""), id="all-threads-body")
        yield Footer()

    @property
    def body(self) -> Static:
        return self.query_one("#all-threads-body", Static)

    def on_mount(self) -> None:
        self.action_reread()

    def action_reread(self) -> None:
        if self.reading:
            return
        self.reading = True
        self.body.update(
            Text(f"reading every thread of rank {self.rank} with gdb (seconds on a torch rank)...")
        )
        poller, post, rank = live_app(self).poller, self.post_message, self.rank

        def read() -> None:
            # A daemon thread, not a worker: quitting must not wait for gdb.
            try:
                dump, error = poller.read_all_threads(rank), None
            except Exception as failure:  # gdb missing, ptrace refused: said on screen
                dump, error = None, str(failure).splitlines()[0] if str(failure) else "failed"
            post(ThreadsReady(rank, dump, error))

        threading.Thread(target=read, name=f"mldebug-gdb-{rank}", daemon=True).start()

    def on_threads_ready(self, message: ThreadsReady) -> None:
        self.reading = False
        if message.dump is None:
            why = message.error or "the rank is not known (any more)"
            self.body.update(Text(f"gdb could not read rank {self.rank}: {why}", style="yellow"))
        else:
            self.body.update(dump_text(message.dump))
