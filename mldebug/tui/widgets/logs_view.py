"""Logs: the tail of every rank's stdout/stderr from the run directory, filtered and searched."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Input, Log, Static

from mldebug.model import LogTail, RunFiles
from mldebug.ranges import parse_ranks
from mldebug.textsafe import one_line

MAX_SHOWN_LINES = 3000
NO_RUN = (
    "Not attached to an `mldebug run` directory, so the ranks' output is not captured. "
    "Start the job with `mldebug run` (or `mldebug run --tui`) to read it here."
)


def select_lines(logs: Iterable[LogTail], ranks_text: str, search: str) -> tuple[list[str], str]:
    """The lines to show, prefixed with their rank, and a note on what was filtered.

    Runs on the UI thread at every change of the logs: only the last MAX_SHOWN_LINES are
    built, from the end, so 1,024 ranks' tails cost a count, not 400,000 new strings.
    """
    wanted: set[int] | None = None
    note = ""
    if ranks_text.strip():
        try:
            wanted = set(parse_ranks(ranks_text))
        except ValueError:
            note = f"'{one_line(ranks_text)}' is not a rank set (try 0-3,7); showing all ranks. "
    needle = search.lower()
    tails = sorted(
        (t for t in logs if wanted is None or t.rank in wanted), key=lambda t: (t.rank, t.stream)
    )
    chunks: list[list[str]] = []  # newest tail first
    total, room = 0, MAX_SHOWN_LINES
    tail: LogTail
    for tail in reversed(tails):
        lines = [ln for ln in tail.lines if needle in ln.lower()] if needle else tail.lines
        total += len(lines)
        if room > 0 and lines:
            mark = "!" if tail.stream == "stderr" else " "
            chunks.append([f"[{tail.rank}]{mark} {line}" for line in lines[-room:]])
            room -= len(chunks[-1])
    if total > MAX_SHOWN_LINES:
        note += f"Showing the last {MAX_SHOWN_LINES} of {total} lines. "
    return [line for chunk in reversed(chunks) for line in chunk], note


class LogsView(Vertical):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._logs: tuple[LogTail, ...] = ()
        self._has_run = False
        self._shown_key: object = None

    def compose(self) -> ComposeResult:
        with Horizontal(id="logs-filters"):
            yield Input(placeholder="ranks: 0-3,7 (empty = all)", id="logs-ranks")
            yield Input(placeholder="search text", id="logs-search")
        yield Static(NO_RUN, id="logs-note")
        yield Log(id="logs-text", max_lines=MAX_SHOWN_LINES)

    def show_files(self, files: RunFiles | None) -> None:
        self._has_run = files is not None
        self._logs = files.logs if files is not None else ()
        self._refresh_text()

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        self._refresh_text()

    def _refresh_text(self) -> None:
        ranks_text = self.query_one("#logs-ranks", Input).value
        search = self.query_one("#logs-search", Input).value
        key = (self._has_run, self._logs, ranks_text, search)
        if key == self._shown_key:
            return
        self._shown_key = key
        note = self.query_one("#logs-note", Static)
        lines, filtered = select_lines(self._logs, ranks_text, search)
        if not self._has_run:
            note.update(NO_RUN)
        elif not self._logs:
            note.update("No output from any rank yet.")
        else:
            # Text, not markup: the note quotes what was typed, and "[N]" is no style.
            note.update(Text(filtered + "[N]! marks stderr. Filter by rank and text above."))
        log = self.query_one("#logs-text", Log)
        log.clear()
        log.write_lines(lines)
