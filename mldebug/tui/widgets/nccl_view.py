"""NCCL: what mldebug.nccl makes of the run (findings, each rank's summary), then the run's
NCCL debug log files and the last lines of the one selected."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Log, OptionList, Static
from textual.widgets.option_list import Option

from mldebug.model import SEVERITY_ERROR, SEVERITY_WARNING, RunFiles
from mldebug.ranges import format_ranks
from mldebug.textsafe import one_line
from mldebug.wording import finding_text, severity_mark

NO_FILES = (
    "No NCCL log files in this run. Start it with `mldebug run --nccl-debug INFO ...` and each "
    "process writes one to <run>/nccl/. This tab shows the last lines of each file."
)
NO_RUN = "Not attached to an `mldebug run` directory: no NCCL log files to show."
NOTHING_FOUND = "NCCL logs and torch.distributed errors: nothing wrong found across the ranks."
SUMMARY_LINES = 60  # of the ranks' summaries shown above the files
STYLES = {SEVERITY_ERROR: "bold red", SEVERITY_WARNING: "yellow"}


def report_text(files: RunFiles) -> Text:
    """The findings (plain Text: every word comes from a file) and the ranks' summaries."""
    text = Text()
    shown = files.nccl_findings
    for finding in shown:
        mark = severity_mark(finding.severity)
        text.append(f"{mark} {one_line(finding_text(finding))}", STYLES.get(finding.severity, ""))
        if finding.recipe:
            text.append(f"  recipe: {one_line(finding.recipe)}", "cyan")
        text.append("\n")
    if not shown and files.nccl_summary:
        text.append(NOTHING_FOUND + "\n")
    for line in files.nccl_summary[:SUMMARY_LINES]:
        text.append(one_line(line) + "\n", "dim" if line.startswith(" ") else "")
    more = len(files.nccl_summary) - SUMMARY_LINES
    if more > 0:
        text.append(f"... {more} more lines: mldebug nccl {one_line(files.root)}\n", "dim")
    text.rstrip()
    return text


class NcclView(Vertical):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._files: dict[str, tuple[str, ...]] = {}
        self._shown: tuple[str, tuple[str, ...]] | None = None

    def compose(self) -> ComposeResult:
        yield Static(NO_RUN, id="nccl-note")
        yield Static("", id="nccl-report")
        with Horizontal():
            yield OptionList(id="nccl-files")
            yield Log(id="nccl-tail", max_lines=2000)

    def show_files(self, files: RunFiles | None) -> None:
        note = self.query_one("#nccl-note", Static)
        if files is None:
            note.update(NO_RUN)
            return
        ranks = {r for f in files.nccl_findings for r in f.ranks}
        self.query_one("#nccl-report", Static).update(report_text(files))
        new = dict(files.nccl)
        if not new:
            note.update(NO_FILES)
        else:
            more = files.nccl_files_total - len(new)
            note.update(
                f"{files.nccl_files_total} NCCL log files"
                + (f" (first {len(new)} shown)" if more > 0 else "")
                + (f"; findings name ranks {format_ranks(ranks)}" if ranks else "")
            )
        options = self.query_one("#nccl-files", OptionList)
        if list(new) != list(self._files):
            highlighted = options.highlighted
            options.clear_options()
            # A file name is data: Text, so OptionList does not read it as markup.
            options.add_options([Option(Text(one_line(name)), id=name) for name in new])
            if new:
                options.highlighted = min(highlighted or 0, len(new) - 1)
        self._files = new
        self._show_selected()

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        self._show_selected()

    def _show_selected(self) -> None:
        options = self.query_one("#nccl-files", OptionList)
        if options.highlighted is None or not self._files:
            return
        name = options.get_option_at_index(options.highlighted).id
        if name is None:
            return
        lines = self._files.get(name, ())
        if self._shown == (name, lines):
            return
        self._shown = (name, lines)
        tail = self.query_one("#nccl-tail", Log)
        tail.clear()
        tail.write_lines(lines)
