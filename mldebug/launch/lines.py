"""Cut a rank's byte stream into whole console lines.

Pure: no I/O and no clock of its own (the caller passes `now`), so it is unit-tested.
A line ends at b"\\n". Inside a line, b"\\r" means "the terminal went back to column 0":
a progress bar redraws itself that way, so only the last drawing is worth showing, and
while it keeps redrawing we show at most one drawing per `progress_interval` seconds.
"""

from __future__ import annotations

# A rank that writes megabytes without a newline must not make us hold them all.
MAX_PENDING = 64 * 1024


def _last_drawing(segments: list[bytes]) -> bytes:
    """What a terminal would show last: the last non-empty piece between carriage returns."""
    for segment in reversed(segments):
        if segment:
            return segment
    return b""


class LineSplitter:
    """Feed it bytes as they arrive; get back complete lines (without b"\\n")."""

    def __init__(self, progress_interval: float = 1.0) -> None:
        self.progress_interval = progress_interval
        self._pending = b""  # bytes after the last newline
        self._progress_shown_at: float | None = None
        self._progress_unshown = b""  # newest complete drawing not shown yet

    def feed(self, data: bytes, now: float) -> list[bytes]:
        lines: list[bytes] = []
        if not data:
            return lines
        buffer = self._pending + data
        *complete, self._pending = buffer.split(b"\n")
        for line in complete:
            if b"\r" in line:
                line = _last_drawing(line.split(b"\r"))
            lines.append(line)
        if complete:
            # A newline ends any progress bar: its final drawing was just shown.
            self._progress_unshown = b""
            self._progress_shown_at = None
        # A trailing b"\r" may be the first half of b"\r\n": wait for the next byte.
        trailing = b"\r" if self._pending.endswith(b"\r") else b""
        body = self._pending[: len(self._pending) - len(trailing)]
        if b"\r" in body:
            *drawn, rest = body.split(b"\r")
            newest = _last_drawing(drawn)
            if newest:
                self._progress_unshown = newest
            self._pending = rest + trailing
        if len(self._pending) > MAX_PENDING:
            lines.append(self._pending)
            self._pending = b""
        lines.extend(self.poll(now))
        return lines

    def poll(self, now: float) -> list[bytes]:
        """A progress drawing that is due for display, if any (call it now and then)."""
        if not self._progress_unshown:
            return []
        shown_at = self._progress_shown_at
        if shown_at is not None and now - shown_at < self.progress_interval:
            return []
        line, self._progress_unshown = self._progress_unshown, b""
        self._progress_shown_at = now
        return [line]

    def finish(self) -> list[bytes]:
        """The stream ended: whatever is left is a line (the final state of a progress bar)."""
        rest = _last_drawing(self._pending.split(b"\r")) or self._progress_unshown
        self._pending = b""
        self._progress_unshown = b""
        self._progress_shown_at = None
        return [rest] if rest else []
