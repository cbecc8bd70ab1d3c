"""NCCL: the run's NCCL debug log files, the last lines of the one selected."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Log, OptionList, Static
from textual.widgets.option_list import Option

from mldebug.model import RunFiles
from mldebug.textsafe import one_line

NO_FILES = (
    "No NCCL log files in this run. Start it with `mldebug run --nccl-debug INFO ...` and each "
    "process writes one to <run>/nccl/. This tab shows the last lines of each file."
)
NO_RUN = "Not attached to an `mldebug run` directory: no NCCL log files to show."


class NcclView(Vertical):
    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._files: dict[str, tuple[str, ...]] = {}
        self._shown: tuple[str, tuple[str, ...]] | None = None

    def compose(self) -> ComposeResult:
        yield Static(NO_RUN, id="nccl-note")
        with Horizontal():
            yield OptionList(id="nccl-files")
            yield Log(id="nccl-tail", max_lines=2000)

    def show_files(self, files: RunFiles | None) -> None:
        note = self.query_one("#nccl-note", Static)
        if files is None:
            note.update(NO_RUN)
            return
        new = dict(files.nccl)
        if not new:
            note.update(NO_FILES)
        else:
            more = files.nccl_files_total - len(new)
            note.update(
                f"{files.nccl_files_total} NCCL log files"
                + (f" (first {len(new)} shown)" if more > 0 else "")
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
        lines = self._files.get(name, ())
        if self._shown == (name, lines):
            return
        self._shown = (name, lines)
        tail = self.query_one("#nccl-tail", Log)
        tail.clear()
        tail.write_lines(lines)
