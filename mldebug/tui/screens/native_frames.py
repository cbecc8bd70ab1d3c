"""Native frames on demand for the ranks a detail screen shows.

py-spy --native is slow (it symbolises every loaded library), so it never runs in the live
poll: a detail screen asks for one reading per rank it shows, in its own thread,
and keeps showing the live Python stack until the reading arrives.
"""

from __future__ import annotations

import threading
from typing import cast

from textual.dom import DOMNode
from textual.screen import Screen

from mldebug.tui.feeds import LiveApp
from mldebug.tui.messages import NativeReady
from mldebug.tui.widgets.rank_detail import RankDetail


def live_app(node: DOMNode) -> LiveApp:
    """The live view a screen of it runs in, typed as such (Textual's `app` is any App)."""
    return cast(LiveApp, node.app)


class NativeFrames(Screen):
    """The base of a Screen that has RankDetail widgets, each showing one rank."""

    native = False

    def details(self) -> dict[int, RankDetail]:
        raise NotImplementedError

    def on_screen_resume(self) -> None:
        # The ranks on screen are read at every poll while they are looked at, even when
        # their agents say they move (the live view otherwise skips those). The app says
        # when none is looked at any more (back at the overview).
        live_app(self).poller.focus(self.details().keys())

    def action_toggle_native(self) -> None:
        self.native = not self.native
        for rank, detail in self.details().items():
            detail.set_native(self.native)
            if self.native:
                self._read_native(rank)

    def _read_native(self, rank: int) -> None:
        # A daemon thread, not a worker: quitting must not wait for a slow native read
        # (Textual joins its worker threads on exit).
        poller, post = live_app(self).poller, self.post_message

        def read() -> None:
            try:
                sample = poller.read_native(rank)
            except Exception:  # a failed read leaves the Python stack on screen
                sample = None
            post(NativeReady(rank, sample))

        threading.Thread(target=read, name=f"mldebug-native-{rank}", daemon=True).start()

    def on_native_ready(self, message: NativeReady) -> None:
        detail = self.details().get(message.rank)
        if detail is not None and self.native:
            if message.sample is None:
                detail.set_native(False)
                self.notify(f"No native reading for rank {message.rank}.", severity="warning")
            else:
                detail.set_native(True, message.sample)
