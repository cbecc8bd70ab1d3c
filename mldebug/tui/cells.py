"""Pure functions that turn model objects into the short strings the widgets show."""

from __future__ import annotations

import os
from collections.abc import Iterable

from rich.cells import cell_len
from rich.text import Text

from mldebug import wording
from mldebug.model import (
    STATE_EXITED,
    STATE_MISSING,
    STATE_RUNNING,
    STATE_STUCK,
    STATE_UNREADABLE,
    STATE_WAITING,
    Frame,
    RankView,
)
from mldebug.report.text import plain
from mldebug.textsafe import one_line

NONE = "-"

# Style per rank state; under NO_COLOR Textual drops the colours and the words remain.
STATE_STYLES = {
    STATE_RUNNING: "green",
    STATE_STUCK: "bold yellow",
    STATE_WAITING: "bold yellow",
    STATE_EXITED: "red",
    STATE_UNREADABLE: "magenta",
    STATE_MISSING: "bold red",
}

# What matters most comes first, so an 80-column terminal shows it without scrolling.
# A rank's training step and heartbeat age come from its in-rank agent: their columns are
# shown only when some rank has one (a job started by `mldebug run`).
RANK_COLUMNS = (
    ("rank", "rank"),
    ("state", "state"),
    ("frame", "current frame"),
    ("collective", "collective"),
    ("cpu", "cpu%"),
    ("mem", "mem"),
    ("host", "host"),
    ("pid", "pid"),
)
AGENT_COLUMNS = (("step", "step"), ("heartbeat", "hb age"))
AGENT_AFTER = "collective"  # they follow this column


def rank_columns(agents: bool) -> tuple[tuple[str, str], ...]:
    """The rank table's (key, label) columns, with the agent's when `agents`."""
    if not agents:
        return RANK_COLUMNS
    keys = [key for key, _ in RANK_COLUMNS]
    at = keys.index(AGENT_AFTER) + 1
    return RANK_COLUMNS[:at] + AGENT_COLUMNS + RANK_COLUMNS[at:]


def human_bytes(value: int | None) -> str:
    """A byte count for a narrow column ("1.5G")."""
    return wording.human_bytes(value, compact=True)


def short_location(frame: Frame | None) -> str:
    """`file.py:12 in fn` with only the file's base name: the table column is narrow.
    On one line and printable: it is shown as it is."""
    if frame is None:
        return NONE
    file = one_line(frame.file)  # before cutting: an escape sequence may hold a "/"
    where = os.path.basename(file) or file
    if frame.line is not None:
        where = f"{where}:{frame.line}"
    return f"{where} {one_line(frame.function)}"


def state_text(view: RankView) -> str:
    if view.state == STATE_EXITED and view.exit_code is not None:
        return f"exited {view.exit_code}"
    return view.state


def age_text(seconds: float | None) -> str:
    if seconds is None:
        return NONE
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def rank_cells(view: RankView, agents: bool = False) -> tuple[str, ...]:
    """The row of the rank table, as plain strings (compared to skip unchanged cells),
    printable and on one line: they come from the ranks. With `agents`, the step and
    heartbeat age columns too (rank_columns)."""
    target = view.target
    agent = (
        (
            NONE if view.step is None else str(view.step),
            age_text(view.heartbeat_age),
        )
        if agents
        else ()
    )
    return (
        str(view.rank),
        state_text(view),
        short_location(view.user_frame),
        one_line(view.collective or NONE),
        *agent,
        NONE if view.cpu_percent is None else f"{view.cpu_percent:.0f}",
        human_bytes(view.rss_bytes),
        (one_line(target.host) if target and target.host else NONE),
        (str(target.pid) if target else NONE),
    )


def styled_cell(column: str, value: str, view: RankView) -> Text:
    """A cell as Text, never a str: DataTable reads a str as markup."""
    if column == "state":
        return plain(value, STATE_STYLES.get(view.state, ""))
    text = plain(value)
    if column in ("rank", "pid", "cpu", "mem", "step", "heartbeat"):
        text.justify = "right"
    return text


def rank_matches(view: RankView, query: str, ranks: set[int] | None) -> bool:
    """Filter: a rank set ("0-3,7") when it parses, else a substring of the row's text."""
    if ranks is not None:
        return view.rank in ranks
    if not query:
        return True
    needle = query.lower()
    return any(needle in cell.lower() for cell in rank_cells(view, view.agent is not None))


class ColumnWidths:
    """The widest text drawn so far in each column of a DataTable.

    DataTable.update_cell keeps a column's width unless asked to measure again, which cuts a
    cell that grew ("exited" -> "exited 137") to the old width; measuring every update costs
    a pass over the whole column whenever a cell shrinks. `grows` says when a new value is
    wider than anything shown in its column, the one time it must be measured.
    """

    def __init__(self, labels: Iterable[object]) -> None:
        self.widths = [cell_len(str(label)) for label in labels]

    def grows(self, index: int, value: str) -> bool:
        width = cell_len(value)
        if width <= self.widths[index]:
            return False
        self.widths[index] = width
        return True

    def fit_row(self, values: Iterable[str]) -> None:
        for index, value in enumerate(values):
            self.grows(index, value)
