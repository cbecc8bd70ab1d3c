"""The rank table: one row per rank, updated in place.

With hundreds of ranks most rows do not change between polls; only the cells whose text
changed are sent to the DataTable. Rows are rebuilt only when the set of shown ranks changes
(a rank appears, or the filter changes). The cells of one poll are one repaint: DataTable asks
for a repaint at each cell it is given, and 1,024 ranks whose agents beat change a thousand
cells a second.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from textual.binding import Binding
from textual.widgets import DataTable

from mldebug.model import JobSnapshot, RankView
from mldebug.ranges import parse_ranks
from mldebug.tui.cells import (
    ColumnWidths,
    rank_cells,
    rank_columns,
    rank_matches,
    styled_cell,
)
from mldebug.tui.messages import ShowRank


def parse_filter(text: str) -> tuple[str, set[int] | None]:
    """A filter is a rank set when it reads as one ("0-3,7"), else free text."""
    text = text.strip()
    if text and all(ch.isdigit() or ch in ",- " for ch in text):
        try:
            return text, set(parse_ranks(text))
        except ValueError:
            pass
    return text, None


class RankTable(DataTable):
    BINDINGS = [Binding("enter", "open_rank", "Rank detail", show=True)]
    # Within _one_repaint(): whether a layout was asked for (DataTable's __init__ refreshes)
    _batch: list[bool] | None = None

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, **kwargs)
        self._rows: dict[int, tuple[str, ...]] = {}  # rank -> cells as shown
        self._order: list[int] = []
        self._filter_text = ""
        self._filter_ranks: set[int] | None = None
        self._views: dict[int, RankView] = {}
        self._agents = False  # some rank has an in-rank agent: the step and hb age columns
        self._columns = rank_columns(False)
        self._widths = ColumnWidths(label for _, label in self._columns)
        self.cells_updated = 0  # cells sent to the DataTable (read by tests and the benchmark)
        self.repaints = 0  # repaints asked for by the updates of a poll (read by tests)

    def refresh(self, *regions: Any, **options: Any) -> Any:
        """Within _one_repaint(), the requests of each cell update become one at its end."""
        if self._batch is not None and not regions and not options.get("recompose"):
            self._batch[0] |= bool(options.get("layout"))
            return self
        return super().refresh(*regions, **options)

    @contextmanager
    def _one_repaint(self) -> Iterator[None]:
        """The updates made within: one repaint (with a layout if one asked for it)."""
        self._batch = [False]
        try:
            yield
        finally:
            layout, self._batch = self._batch[0], None
            self.repaints += 1
            super().refresh(layout=layout)

    def on_mount(self) -> None:
        self._add_columns()

    def _add_columns(self) -> None:
        self._columns = rank_columns(self._agents)
        for key, label in self._columns:
            self.add_column(label, key=key)

    @property
    def column_keys(self) -> list[str]:
        return [key for key, _ in self._columns]

    def set_filter(self, text: str) -> None:
        self._filter_text, self._filter_ranks = parse_filter(text)
        if self._views:
            self._apply(list(self._views.values()))

    def show(self, snapshot: JobSnapshot) -> None:
        self._views = {view.rank: view for view in snapshot.ranks}
        agents = any(view.agent is not None for view in snapshot.ranks)
        if agents != self._agents:  # an agent appeared (or all went): other columns
            self._agents = agents
            selected = self.selected_rank
            self.clear(columns=True)
            self._add_columns()
            self._rows.clear()
            self._order = []
            self._apply(list(snapshot.ranks))
            if selected in self._rows:
                self.move_cursor(row=self._order.index(selected), animate=False)
            return
        self._apply(list(snapshot.ranks))

    @property
    def shown_ranks(self) -> list[int]:
        return list(self._order)

    def _apply(self, views: list[RankView]) -> None:
        wanted = [
            view
            for view in sorted(views, key=lambda v: v.rank)
            if rank_matches(view, self._filter_text.lower(), self._filter_ranks)
        ]
        order = [view.rank for view in wanted]
        if order != self._order:
            self._rebuild(wanted)
            return
        columns = self.column_keys
        changed = [
            (view, cells)
            for view in wanted
            if (cells := rank_cells(view, self._agents)) != self._rows[view.rank]
        ]
        if not changed:
            return
        with self._one_repaint():
            self._update(changed, columns)

    def _update(self, changed: list[tuple[RankView, tuple[str, ...]]], columns: list[str]) -> None:
        for view, cells in changed:
            old = self._rows[view.rank]
            for index, (new_value, old_value) in enumerate(zip(cells, old, strict=True)):
                if new_value != old_value:
                    column = columns[index]
                    grows = self._widths.grows(index, new_value)
                    self.update_cell(
                        str(view.rank),
                        column,
                        styled_cell(column, new_value, view),
                        update_width=grows or column == "frame",
                    )
                    self.cells_updated += 1
            self._rows[view.rank] = cells

    def _rebuild(self, views: list[RankView]) -> None:
        selected = self.selected_rank
        self.clear()
        self._rows.clear()
        self._widths = ColumnWidths(label for _, label in self._columns)
        columns = self.column_keys
        for view in views:
            cells = rank_cells(view, self._agents)
            self.add_row(
                *(styled_cell(c, v, view) for c, v in zip(columns, cells, strict=True)),
                key=str(view.rank),
            )
            self._rows[view.rank] = cells
            self._widths.fit_row(cells)
            self.cells_updated += len(cells)
        self._order = [view.rank for view in views]
        if selected in self._rows:
            self.move_cursor(row=self._order.index(selected), animate=False)

    @property
    def selected_rank(self) -> int | None:
        if not self._order or self.cursor_row < 0 or self.cursor_row >= len(self._order):
            return None
        return self._order[self.cursor_row]

    def action_open_rank(self) -> None:
        rank = self.selected_rank
        if rank is not None:
            self.post_message(ShowRank(rank))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_open_rank()
