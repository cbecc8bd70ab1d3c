"""Two ranks side by side, kept live: where did they part ways?"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.widgets import Footer, Static

from mldebug.model import JobSnapshot
from mldebug.tui.screens.native_frames import NativeFrames, live_app
from mldebug.tui.widgets.rank_detail import RankDetail, find_rank


class CompareScreen(NativeFrames):
    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("n", "toggle_native", "Native frames"),
    ]

    def __init__(self, left: int, right: int) -> None:
        super().__init__()
        self.left, self.right = left, right

    def compose(self) -> ComposeResult:
        yield Static(f"Rank {self.left} | rank {self.right}", classes="screen-title")
        with Horizontal():
            yield RankDetail(live_app(self).sources, id="compare-left")
            yield RankDetail(live_app(self).sources, id="compare-right")
        yield Footer()

    def on_mount(self) -> None:
        self.show_snapshot(live_app(self).snapshot)

    def show_snapshot(self, snapshot: JobSnapshot | None) -> None:
        self.query_one("#compare-left", RankDetail).show(find_rank(snapshot, self.left))
        self.query_one("#compare-right", RankDetail).show(find_rank(snapshot, self.right))

    def details(self) -> dict[int, RankDetail]:
        return {
            self.left: self.query_one("#compare-left", RankDetail),
            self.right: self.query_one("#compare-right", RankDetail),
        }
