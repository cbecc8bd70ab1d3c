"""The one-line status under the tabs: live or paused, job size, states, poll health."""

from __future__ import annotations

import time
from collections import Counter
from typing import Protocol

from rich.text import Text

from mldebug.model import JobSnapshot
from mldebug.textsafe import one_line

SLOW_POLL = 0.5  # seconds; below this the poll time is not worth a word


class StatusSource(Protocol):
    """What the status line reads of the app (tui/app.py's AttachApp)."""

    paused: bool
    interval: float
    snapshot: JobSnapshot | None
    poll_seconds: float
    last_error: str
    waiting: bool
    last_report: str


def status_text(app: StatusSource) -> Text:
    text = Text()
    if app.paused:
        text.append(" PAUSED ", style="reverse bold")
        text.append("  p resumes", style="dim")
    else:
        text.append(" LIVE ", style="reverse bold green")
        text.append(f"  every {app.interval:g}s", style="dim")
    snapshot = app.snapshot
    if snapshot is None:
        text.append("   reading stacks...")
    else:
        states = Counter(view.state for view in snapshot.ranks)
        size = snapshot.world_size or len(snapshot.ranks)
        text.append(f"   {len(snapshot.ranks)}/{size} ranks: ")
        text.append(", ".join(f"{count} {state}" for state, count in sorted(states.items())))
        text.append(
            f"   at {time.strftime('%H:%M:%S', time.localtime(snapshot.time))}", style="dim"
        )
    if app.poll_seconds >= SLOW_POLL:
        text.append(f"   last poll took {app.poll_seconds:.1f}s", style="yellow")
    if app.last_error and app.waiting:
        text.append(f"   waiting: {one_line(app.last_error)}", style="yellow")
    elif app.last_error:
        text.append(f"   poll failed: {one_line(app.last_error)}", style="bold red")
    if app.last_report:
        text.append(f"   saved {one_line(app.last_report)}", style="dim")
    return text
