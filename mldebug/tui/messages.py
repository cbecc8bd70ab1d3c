"""Messages the TUI passes around: small, and a new snapshot replaces an older one."""

from __future__ import annotations

from pathlib import Path

from textual.message import Message

from mldebug.model import JobSnapshot, NativeDump, RunFiles, StackSample


class SnapshotReady(Message):
    """A poll finished: the job as it is now, and what its run directory holds."""

    def __init__(self, snapshot: JobSnapshot, files: RunFiles | None, seconds: float) -> None:
        super().__init__()
        self.snapshot = snapshot
        self.files = files
        self.seconds = seconds  # how long the poll took

    def can_replace(self, message: Message) -> bool:
        # Only the newest snapshot matters; an older one still queued can go.
        return isinstance(message, SnapshotReady)


class PollFailed(Message):
    """The poller raised: shown in the status line; the next tick tries again.

    `waiting` is for an expected state (no rank found yet), not for a fault.
    """

    def __init__(self, error: str, waiting: bool = False) -> None:
        super().__init__()
        self.error = error
        self.waiting = waiting


class ShowRank(Message):
    """Open the detail screen of one rank."""

    def __init__(self, rank: int) -> None:
        super().__init__()
        self.rank = rank


class ShowRecipe(Message):
    """Switch to the Recipes tab, opened at one recipe."""

    def __init__(self, recipe_id: str) -> None:
        super().__init__()
        self.recipe_id = recipe_id


class NativeReady(Message):
    """A native (C/C++) stack reading of one rank, asked for by a detail screen."""

    def __init__(self, rank: int, sample: StackSample | None) -> None:
        super().__init__()
        self.rank = rank
        self.sample = sample


class ReportSaved(Message):
    """The report `s` asked for is written (or could not be: `error`)."""

    def __init__(
        self, text_path: Path | None = None, json_path: Path | None = None, error: str | None = None
    ) -> None:
        super().__init__()
        self.text_path = text_path
        self.json_path = json_path
        self.error = error


class ThreadsReady(Message):
    """Every thread of one rank from gdb (`NativeDump`), asked for by the all-threads screen;
    None with `error` when it could not be read."""

    def __init__(self, rank: int, dump: NativeDump | None, error: str | None = None) -> None:
        super().__init__()
        self.rank = rank
        self.dump = dump
        self.error = error
