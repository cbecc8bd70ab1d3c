"""Asked on quit when the TUI launched the job itself: stop it, or leave it running?"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

STOP, DETACH = "stop", "detach"


class QuitScreen(ModalScreen[str | None]):
    BINDINGS = [
        Binding("s,y", "choose('stop')", "Stop the job"),
        Binding("d", "choose('detach')", "Leave it running"),
        Binding("escape,c", "choose('')", "Cancel"),
        Binding("q", "choose('stop')", "Stop the job", show=False),
    ]

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static("Quit mldebug. What about the job?", classes="dialog-title")
            yield Static("[b]s[/b]  stop the job (all ranks) and quit")
            yield Static("[b]d[/b]  quit and leave the job running")
            yield Static("[b]esc[/b]  stay")

    def action_choose(self, choice: str) -> None:
        self.dismiss(choice or None)
