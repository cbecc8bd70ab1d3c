"""One rank's detail, kept live; `c` compares it with another rank."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Footer, Static

from mldebug.model import JobSnapshot
from mldebug.tui.screens.native_frames import NativeFrames, live_app
from mldebug.tui.screens.rank_prompt import RankPrompt
from mldebug.tui.widgets.rank_detail import RankDetail, find_rank


class RankScreen(NativeFrames):
    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("n", "toggle_native", "Native frames"),
        Binding("c", "compare", "Compare with..."),
        Binding("g", "all_threads", "All threads (gdb)"),
    ]

    def __init__(self, rank: int) -> None:
        super().__init__()
        self.rank = rank

    def compose(self) -> ComposeResult:
        yield Static(f"Rank {self.rank}", classes="screen-title", id="rank-title")
        yield RankDetail(live_app(self).sources, id="rank-detail")
        yield Footer()

    def details(self) -> dict[int, RankDetail]:
        return {self.rank: self.query_one(RankDetail)}

    def on_mount(self) -> None:
        self.show_snapshot(live_app(self).snapshot)

    def show_snapshot(self, snapshot: JobSnapshot | None) -> None:
        self.query_one(RankDetail).show(find_rank(snapshot, self.rank))

    def action_compare(self) -> None:
        def chosen(other: int | None) -> None:
            if other is not None:
                from mldebug.tui.screens.compare_screen import CompareScreen

                self.app.push_screen(CompareScreen(self.rank, other))

        self.app.push_screen(RankPrompt(f"Compare rank {self.rank} with rank:"), chosen)

    def action_all_threads(self) -> None:
        from mldebug.tui.screens.all_threads import AllThreadsScreen

        self.app.push_screen(AllThreadsScreen(self.rank))
