"""Anomalies: every finding of the latest snapshot, then the agent's events of the run."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from mldebug.model import Finding, RankEvent, RunFiles
from mldebug.ranges import format_ranks
from mldebug.report.text import plain
from mldebug.tui.messages import ShowRecipe
from mldebug.wording import finding_text

NO_EVENTS = "No events: no rank has written <run>/ranks/<rank>/events.jsonl."
NO_RUN = (
    "Not attached to an `mldebug run` directory, so there are no event files to show "
    "(attach with --run DIR to read one)."
)


def event_time(when: float | None) -> str:
    return time.strftime("%H:%M:%S", time.localtime(when)) if when is not None else "-"


class AnomaliesView(Vertical):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._findings: tuple[Finding, ...] | None = None
        self._events: tuple[RankEvent, ...] | None = None  # as shown in the table

    def compose(self) -> ComposeResult:
        yield Static("Findings (enter opens the recipe)", classes="section-title")
        yield DataTable(id="findings-table", cursor_type="row")
        yield Static("Events", classes="section-title")
        yield Static(NO_RUN, id="events-note")
        yield DataTable(id="events-table", cursor_type="row")

    def on_mount(self) -> None:
        findings = self.query_one("#findings-table", DataTable)
        findings.add_columns("severity", "kind", "ranks", "summary", "location", "recipe")
        events = self.query_one("#events-table", DataTable)
        events.add_columns("time", "rank", "kind", "message", "location")

    def show_findings(self, findings: Iterable[Finding]) -> None:
        findings = tuple(findings)
        if findings == self._findings:
            return
        self._findings = findings
        self._refill(
            "#findings-table",
            (
                (
                    f.severity,
                    f.kind,
                    format_ranks(f.ranks),
                    finding_text(f),
                    f.location or "-",
                    f.recipe or "-",
                )
                for f in findings
            ),
        )

    def _refill(self, table_id: str, rows: Iterable[tuple[str, ...]]) -> DataTable:
        """The table's rows replaced by `rows`."""
        table = self.query_one(table_id, DataTable)
        table.clear()
        for row in rows:
            # Text, never str: DataTable reads a str as markup, and these come from ranks.
            table.add_row(*(plain(cell) for cell in row))
        return table

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        """Enter on a finding opens its recipe."""
        if event.data_table.id != "findings-table" or not self._findings:
            return
        event.stop()
        finding = self._findings[event.cursor_row]
        if finding.recipe:
            self.post_message(ShowRecipe(finding.recipe))

    def show_files(self, files: RunFiles | None) -> None:
        note = self.query_one("#events-note", Static)
        if files is None:
            note.update(NO_RUN)
            return
        events = files.events
        message = NO_EVENTS if not events else f"{len(events)} events (newest last)."
        if files.bad_event_lines:
            message += f" {files.bad_event_lines} lines were not JSON and were skipped."
        note.update(Text(message, style="dim" if not events else ""))
        # Compared whole, not counted: once the newest MAX_EVENTS are shown, a new event
        # pushes out an old one and the count stays the same. (Unchanged files hand back
        # the same event objects, so this is cheap.)
        if events == self._events:
            return
        self._events = events
        table = self._refill(
            "#events-table",
            (
                (event_time(e.time), str(e.rank), e.kind, e.message, e.location or "-")
                for e in events
            ),
        )
        if events:
            table.move_cursor(row=len(events) - 1, animate=False)
