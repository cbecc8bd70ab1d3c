"""One rank in full: every thread's stack, current line first, with the source line."""

from __future__ import annotations

import linecache

from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

from mldebug.model import RankView, ThreadStack
from mldebug.tui.cells import age_text, human_bytes, short_location, state_text


def source_line(file: str, line: int | None) -> str:
    """The text of file:line when the file exists here (the job may run elsewhere)."""
    if line is None or not file or file.startswith("<"):
        return ""
    return linecache.getline(file, line).strip()


def thread_text(thread: ThreadStack, native: bool) -> Text:
    text = Text()
    flags = []
    if thread.active:
        flags.append("active")
    if thread.owns_gil:
        flags.append("gil")
    text.append(f"Thread {thread.thread_id}", style="bold")
    if thread.name:
        text.append(f' "{thread.name}"', style="bold")
    if thread.os_thread_id:
        text.append(f" (tid {thread.os_thread_id})", style="dim")
    if flags:
        text.append(f" [{', '.join(flags)}]", style="green")
    frames = [f for f in thread.frames if native or not f.native]
    hidden = len(thread.frames) - len(frames)
    for depth, frame in enumerate(reversed(frames)):  # innermost (current) first
        marker = "→ " if depth == 0 else "  "
        text.append(f"\n{marker}")
        text.append(frame.function, style="dim" if frame.native else "bold" if depth == 0 else "")
        text.append(f"  {frame.location}", style="cyan" if not frame.native else "dim")
        code = source_line(frame.file, frame.line) if not frame.native else ""
        if code:
            text.append(f"\n      {code}", style="italic")
    if hidden:
        text.append(f"\n  ({hidden} native frames hidden: press n)", style="dim")
    if not thread.frames:
        text.append("\n  (no frames)", style="dim")
    return text


def rank_header(view: RankView) -> Text:
    target = view.target
    text = Text()
    text.append(f"rank {view.rank}", style="bold")
    if target:
        text.append(f"  pid {target.pid}")
        if target.host:
            text.append(f" on {target.host}")
    text.append(f"  {state_text(view)}", style="bold yellow")
    if view.collective:
        text.append(f"  in {view.collective}", style="bold")
    text.append(f"\nframe {short_location(view.user_frame)}  cpu ")
    text.append("-" if view.cpu_percent is None else f"{view.cpu_percent:.0f}%")
    text.append(f"  mem {human_bytes(view.rss_bytes)}")
    text.append(f"  step {'-' if view.step is None else view.step}")
    text.append(f"  heartbeat {age_text(view.heartbeat_age)}")
    if view.detail:
        text.append(f"\n{view.detail}", style="magenta")
    return text


def rank_text(view: RankView | None, native: bool) -> Text:
    if view is None:
        return Text("This rank is not in the latest snapshot.", style="dim")
    text = rank_header(view)
    if not view.threads:
        text.append("\n\nNo stack: ", style="bold")
        text.append(view.detail or "the rank could not be read.")
    for thread in view.threads:
        text.append("\n\n")
        text.append_text(thread_text(thread, native))
    return text


class RankDetail(VerticalScroll):
    """Scrollable text of one rank; `show` is cheap to call every poll."""

    def __init__(self, native: bool = False, **kwargs) -> None:
        super().__init__(**kwargs)
        self.native = native
        self._view: RankView | None = None
        self._body = Static(Text("..."), classes="rank-body")

    def compose(self):
        yield self._body

    def show(self, view: RankView | None) -> None:
        self._view = view
        self._body.update(rank_text(view, self.native))

    def set_native(self, native: bool) -> None:
        self.native = native
        self.show(self._view)

    @property
    def text(self) -> str:
        return rank_text(self._view, self.native).plain
