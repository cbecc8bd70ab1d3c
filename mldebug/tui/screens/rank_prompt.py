"""A small modal asking for a rank number."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Static


class RankPrompt(ModalScreen[int | None]):
    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(self.question)
            yield Input(placeholder="rank number, then Enter", id="rank-input", type="integer")
            yield Static("", id="rank-error", classes="dialog-error")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        text = event.value.strip()
        if not text.isdigit():
            self.query_one("#rank-error", Static).update("A rank is a number: 0, 1, 2...")
            return
        self.dismiss(int(text))

    def action_cancel(self) -> None:
        self.dismiss(None)
