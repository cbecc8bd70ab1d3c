"""Memory per rank: host RSS now, read from /proc, with a short history; what grows (the
memory findings: a trend by time from the agents' timelines, with its forecast, and the
census of live tensors that names what is growing). `c` asks the ranks' agents for a
census (a file in the run directory, through the app's poller)."""

from __future__ import annotations

from collections import deque
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import DataTable, Sparkline, Static

from mldebug.model import (
    KIND_MEMORY_CENSUS,
    KIND_MEMORY_GROWTH,
    KIND_MEMORY_OUTLIER,
    JobSnapshot,
)
from mldebug.tui.cells import NONE, ColumnWidths, human_bytes
from mldebug.wording import finding_text

MEMORY_COLUMNS = (
    ("rank", "rank"),
    ("rss", "rss"),
    ("peak", "peak rss (seen)"),
)
HISTORY = 120  # polls kept (two minutes at the default interval)


MEMORY_KINDS = (KIND_MEMORY_GROWTH, KIND_MEMORY_OUTLIER, KIND_MEMORY_CENSUS)


class CensusAsked(Message):
    """The user asked for a census of the ranks' live tensors (the `c` key)."""


def growth_text(snapshot: JobSnapshot) -> Text:
    """The memory findings as lines: what grows, how fast, until when, and what it is."""
    text = Text()
    for finding in snapshot.findings:
        if finding.kind not in MEMORY_KINDS:
            continue
        if text:
            text.append("\n")
        style = "bold yellow" if finding.severity == "warning" else "bold"
        text.append(finding_text(finding), style=style)  # rank-derived text: plain, never markup
        if finding.detail and finding.kind == KIND_MEMORY_GROWTH:
            text.append("\n  " + finding.detail, style="dim")
        for part in finding.parts if finding.kind == KIND_MEMORY_CENSUS else ():
            text.append("\n  " + part.label)
    return text


class MemoryView(Vertical):
    BINDINGS = [Binding("c", "census", "Census of tensors")]

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.total_history: deque[float] = deque(maxlen=HISTORY)
        self.max_history: deque[float] = deque(maxlen=HISTORY)
        self._rows: dict[int, tuple[str, ...]] = {}
        self._peaks: dict[int, int] = {}  # largest RSS seen per rank while attached
        self._widths = ColumnWidths(label for _, label in MEMORY_COLUMNS)

    def compose(self) -> ComposeResult:
        yield Static(id="memory-summary")
        yield Sparkline([], id="memory-total", summary_function=max)
        yield Static(
            Text(
                "Host memory (RSS) of each rank process, read from /proc at each refresh. "
                "GPU memory is not read.",
                style="dim",
            ),
            id="memory-note",
        )
        yield DataTable(id="memory-table", cursor_type="row")
        yield Static(id="memory-growth")

    def on_mount(self) -> None:
        table = self.query_one("#memory-table", DataTable)
        for key, label in MEMORY_COLUMNS:
            table.add_column(label, key=key)

    def show(self, snapshot: JobSnapshot) -> None:
        known = [v.rss_bytes for v in snapshot.ranks if v.rss_bytes is not None]
        total = float(sum(known))
        self.total_history.append(total)
        self.max_history.append(float(max(known, default=0)))
        self.query_one("#memory-total", Sparkline).data = list(self.total_history)
        summary = Text()
        summary.append("host RSS, all ranks: ", style="bold")
        summary.append(human_bytes(int(total)) if known else NONE)
        summary.append(f"   largest rank: {human_bytes(max(known)) if known else NONE}")
        summary.append(f"   history: last {len(self.total_history)} polls", style="dim")
        self.query_one("#memory-summary", Static).update(summary)
        self._update_table(snapshot)
        growth = self.query_one("#memory-growth", Static)
        text = growth_text(snapshot)
        growth.update(text)
        growth.display = bool(text)  # no empty line while nothing grows

    def action_census(self) -> None:
        self.post_message(CensusAsked())

    def _update_table(self, snapshot: JobSnapshot) -> None:
        table = self.query_one("#memory-table", DataTable)
        ranks = sorted(snapshot.ranks, key=lambda v: v.rank)
        if [v.rank for v in ranks] != list(self._rows):
            table.clear()
            self._rows = {}
            self._widths = ColumnWidths(label for _, label in MEMORY_COLUMNS)
            for view in ranks:
                cells = self._cells(view.rank, view.rss_bytes)
                table.add_row(*cells, key=str(view.rank))
                self._rows[view.rank] = cells
                self._widths.fit_row(cells)
            return
        for view in ranks:
            cells = self._cells(view.rank, view.rss_bytes)
            old = self._rows[view.rank]
            for index, (new, before) in enumerate(zip(cells, old, strict=True)):
                if new != before:
                    table.update_cell(
                        str(view.rank),
                        MEMORY_COLUMNS[index][0],
                        new,
                        update_width=self._widths.grows(index, new),
                    )
            self._rows[view.rank] = cells

    def _cells(self, rank: int, rss: int | None) -> tuple[str, ...]:
        peak = max(rss or 0, self._peaks.get(rank, 0))
        if peak:
            self._peaks[rank] = peak
        return (str(rank), human_bytes(rss), human_bytes(peak or None))
