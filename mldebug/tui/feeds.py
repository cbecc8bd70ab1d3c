"""What the live view is handed: the sources it draws from, as small protocols. The app
never builds a reader itself; `mldebug attach` hands it the real ones (mldebug.live) and
tests hand it fakes, so the real readers never run in a unit test (memray's
`TUIApp(reader)`).

Every member may block on the disk or a process: the app calls them from worker threads,
never from the UI thread.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, runtime_checkable

from mldebug.model import JobSnapshot, NativeDump, RunFiles, StackSample


@runtime_checkable
class Poller(Protocol):
    def poll(self) -> JobSnapshot:
        """Read the job once. Must not raise for a problem with one rank."""
        ...

    def read_native(self, rank: int) -> StackSample | None:
        """One reading of one rank with native (C/C++) frames; None for an unknown rank.

        Native reads are slow (seconds on a process that loaded libtorch), so the app asks
        for them only for the ranks on screen, in their own worker, never in the live poll.
        """
        ...

    def read_all_threads(self, rank: int) -> NativeDump | None:
        """Every thread of one rank with gdb (native frames, lined up with the rank's last
        py-spy reading); None for an unknown rank. Slow: asked for off the UI thread."""
        ...

    def focus(self, ranks: Iterable[int]) -> None:
        """The ranks a detail screen shows (none: empty): their stacks are read at every
        poll, even while their agents say they move. Cheap; called on the UI thread."""
        ...

    def close(self) -> None:
        """Release what the poller holds; called once when the app ends."""
        ...


class RunFilesFeed(Protocol):
    def read(self) -> RunFiles:
        """The run directory's logs, events and NCCL files, read again where they changed
        (mldebug.live.runfiles.RunFilesReader)."""
        ...


class SourceFeed(Protocol):
    def line(self, path: str, number: int | None) -> str | None:
        """A source line of a frame on screen: "" when there is none, None when its file
        was not read yet. Cheap: called on the UI thread."""
        ...

    def refresh(self, paths: Iterable[str]) -> bool:
        """Read the files among `paths` that are new or changed; True if any was."""
        ...


class NoSources:
    """A SourceFeed without files: frames are shown without their source line."""

    def line(self, path: str, number: int | None) -> str | None:
        return ""

    def refresh(self, paths: Iterable[str]) -> bool:
        return False


class LiveApp(Protocol):
    """What the live view's screens use of the app (tui/app.py's AttachApp)."""

    poller: Poller
    sources: SourceFeed
    snapshot: JobSnapshot | None
