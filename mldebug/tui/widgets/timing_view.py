"""The Timing tab: per rank where its step time goes, a sparkline of its step times, and the
straggler marked (from the snapshot's timing table, analysis/timing.py); when the job slowed
down over the run, the whole run's sparkline with the change marked (tui/change_spark.py)."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from mldebug.model import Finding, JobSnapshot
from mldebug.model.timing import TimingRow, TimingTable
from mldebug.report.timing import agent_cells, ordered_rows, sparkline
from mldebug.textsafe import printable
from mldebug.tui.change_spark import change_cells
from mldebug.wording import finding_text

COLUMNS = ("rank", "step", "waiting", "data", "sync", "compute", "last at", "step times", "")
KINDS = ("straggler", "input_bound", "comm_bound", "host_sync", "slowdown")
MAX_ROWS = 256  # rows drawn; a larger job shows its stragglers and latest arrivers first
EMPTY = (
    "No timing yet. Ranks started by `mldebug run` report where their steps' time goes once "
    "they have made a few optimizer steps; for other jobs: mldebug dump --profile 5"
)


def row_cells(row: TimingRow, change: tuple[Text, Text] | None = None) -> tuple[Text, ...]:
    """A rank's row; `change`: its whole-run sparkline and mark when the job slowed down
    over the run (tui/change_spark.py), in place of the window's step times."""
    mark = Text("◀ straggler", style="bold yellow") if row.straggler else Text("")
    cells = [Text(c) for c in (str(row.rank), *agent_cells(row))]
    if change is not None:
        return (*cells, change[0], mark if row.straggler else change[1])
    return (*cells, Text(sparkline(row.step_times)), mark)


def summary_text(table: TimingTable | None, findings: tuple[Finding, ...]) -> Text:
    text = Text()
    timing = [f for f in findings if f.kind in KINDS]
    if table is None or not table.rows:
        text.append(EMPTY, style="dim")
        return text
    if timing:
        text.append("▲ ", style="bold yellow")
        text.append(printable(finding_text(timing[0])), style="bold")
    else:
        text.append("● ", style="green")
        text.append("No rank keeps the others waiting.")
    if table.note:
        text.append(f"\n{printable(table.note)}", style="dim")
    return text


class TimingView(Vertical):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._shown: tuple = ()

    def compose(self) -> ComposeResult:
        yield Static(summary_text(None, ()), id="timing-summary")
        yield DataTable(id="timing-table", cursor_type="row")

    def on_mount(self) -> None:
        table = self.query_one("#timing-table", DataTable)
        for label in COLUMNS:
            table.add_column(label, key=label or "mark")

    def show(self, snapshot: JobSnapshot) -> None:
        timing = snapshot.timing
        key = (timing, snapshot.findings)
        if key == self._shown:
            return
        self._shown = key
        self.query_one("#timing-summary", Static).update(summary_text(timing, snapshot.findings))
        table = self.query_one("#timing-table", DataTable)
        table.clear()
        if timing is None:
            return
        changes = change_cells(snapshot)
        for row in ordered_rows(timing)[:MAX_ROWS]:
            table.add_row(*row_cells(row, changes.get(row.rank)), key=str(row.rank))
