"""Native frames on demand for the ranks a detail screen shows.

py-spy --native is slow (it symbolises every loaded library), so it never runs in the live
poll: a detail screen asks for one reading per rank it shows, in its own thread worker,
and keeps showing the live Python stack until the reading arrives.
"""

from __future__ import annotations

from textual import work

from mldebug.tui.messages import NativeReady
from mldebug.tui.widgets.rank_detail import RankDetail


class NativeFrames:
    """Mixed into a Screen that has RankDetail widgets, each showing one rank."""

    native = False

    def details(self) -> dict[int, RankDetail]:
        raise NotImplementedError

    def action_toggle_native(self) -> None:
        self.native = not self.native
        for rank, detail in self.details().items():
            detail.set_native(self.native)
            if self.native:
                self._read_native(rank)

    @work(thread=True, exit_on_error=False, group="native")
    def _read_native(self, rank: int) -> None:
        try:
            sample = self.app.poller.read_native(rank)
        except Exception:  # a failed read leaves the Python stack on screen
            sample = None
        self.post_message(NativeReady(rank, sample))

    def on_native_ready(self, message: NativeReady) -> None:
        detail = self.details().get(message.rank)
        if detail is not None and self.native:
            if message.sample is None:
                detail.set_native(False)
                self.notify(f"No native reading for rank {message.rank}.", severity="warning")
            else:
                detail.set_native(True, message.sample)
