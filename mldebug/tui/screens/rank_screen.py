"""One rank's detail, kept live; `c` compares it with another rank."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, Static

from mldebug.model import JobSnapshot
from mldebug.tui.screens.rank_prompt import RankPrompt
from mldebug.tui.widgets.rank_detail import RankDetail


def find_rank(snapshot: JobSnapshot | None, rank: int):
    if snapshot is None:
        return None
    for view in snapshot.ranks:
        if view.rank == rank:
            return view
    return None


class RankScreen(Screen):
    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back"),
        Binding("n", "toggle_native", "Native frames"),
        Binding("c", "compare", "Compare with..."),
    ]

    def __init__(self, rank: int, native: bool = False) -> None:
        super().__init__()
        self.rank = rank
        self.native = native

    def compose(self) -> ComposeResult:
        yield Static(f"Rank {self.rank}", classes="screen-title", id="rank-title")
        yield RankDetail(native=self.native, id="rank-detail")
        yield Footer()

    def on_mount(self) -> None:
        self.show_snapshot(self.app.snapshot)

    def show_snapshot(self, snapshot: JobSnapshot | None) -> None:
        self.query_one(RankDetail).show(find_rank(snapshot, self.rank))

    def action_toggle_native(self) -> None:
        self.native = not self.native
        self.query_one(RankDetail).set_native(self.native)
        self.app.set_native(self.native)

    def action_compare(self) -> None:
        def chosen(other: int | None) -> None:
            if other is not None:
                from mldebug.tui.screens.compare_screen import CompareScreen

                self.app.push_screen(CompareScreen(self.rank, other, native=self.native))

        self.app.push_screen(RankPrompt(f"Compare rank {self.rank} with rank:"), chosen)
