"""One rank in full: every thread's stack, current line first, with the source line."""

from __future__ import annotations

import threading
import time
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.message import Message
from textual.widgets import Static

from mldebug.model import JobSnapshot, RankView, StackSample, ThreadStack
from mldebug.report.text import group_progress_text
from mldebug.textsafe import one_line, printable
from mldebug.tui.cells import age_text, human_bytes, short_location, state_text
from mldebug.tui.feeds import SourceFeed

MAX_FUNCTION = 100  # demangled C++ template names run to thousands of characters
MAX_GROUPS_SHOWN = 8  # process groups of a rank listed in its header


def short_function(name: str) -> str:
    name = one_line(name)
    return name if len(name) <= MAX_FUNCTION else name[: MAX_FUNCTION - 1] + "…"


def find_rank(snapshot: JobSnapshot | None, rank: int) -> RankView | None:
    if snapshot is None:
        return None
    for view in snapshot.ranks:
        if view.rank == rank:
            return view
    return None


def thread_text(thread: ThreadStack, native: bool, sources: SourceFeed | None = None) -> Text:
    text = Text()
    flags = []
    if thread.active:
        flags.append("active")
    if thread.owns_gil:
        flags.append("gil")
    text.append(f"Thread {thread.thread_id}", style="bold")
    if thread.name:
        text.append(f' "{one_line(thread.name)}"', style="bold")
    if thread.os_thread_id:
        text.append(f" (tid {thread.os_thread_id})", style="dim")
    if flags:
        text.append(f" [{', '.join(flags)}]", style="green")
    frames = [f for f in thread.frames if native or not f.native]
    hidden = len(thread.frames) - len(frames)
    for depth, frame in enumerate(reversed(frames)):  # innermost (current) first
        marker = "→ " if depth == 0 else "  "
        text.append(f"\n{marker}")
        text.append(
            short_function(frame.function),
            style="dim" if frame.native else "bold" if depth == 0 else "",
        )
        text.append(f"  {one_line(frame.location)}", style="cyan" if not frame.native else "dim")
        code = sources.line(frame.file, frame.line) if sources and not frame.native else ""
        if code:
            code = one_line(code)
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
            text.append(f" on {one_line(target.host)}")
    text.append(f"  {state_text(view)}", style="bold yellow")
    if view.collective:
        text.append(f"  in {view.collective}", style="bold")
    text.append(f"\nframe {short_location(view.user_frame)}")
    if view.dataloader_worker is not None:
        text.append(f" (in DataLoader worker {view.dataloader_worker})", style="bold")
    text.append("  cpu ")
    text.append("-" if view.cpu_percent is None else f"{view.cpu_percent:.0f}%")
    text.append(f"  mem {human_bytes(view.rss_bytes)}")
    if view.step is not None:  # known only from an in-rank agent that reports it
        text.append(f"  step {view.step}")
    if view.heartbeat_age is not None:
        text.append(f"  heartbeat {age_text(view.heartbeat_age)}")
    groups = view.agent.groups if view.agent is not None else ()
    for progress in groups[:MAX_GROUPS_SHOWN]:  # where its agent says it is, per group
        text.append(f"\n{group_progress_text(progress)}", style="cyan")
    if len(groups) > MAX_GROUPS_SHOWN:
        text.append(f"\n({len(groups) - MAX_GROUPS_SHOWN} more process groups)", style="dim")
    if view.detail:
        text.append(f"\n{printable(view.detail)}", style="magenta")
    return text


def native_note(sample: StackSample | None) -> Text:
    if sample is None:
        return Text(
            "reading native frames with py-spy --native (10 s or more on a process "
            "that loaded libtorch)...",
            style="yellow",
        )
    if sample.failure:
        return Text(
            "native frames could not be read: "
            + printable(sample.failure_detail or sample.failure),
            style="magenta",
        )
    when = time.strftime("%H:%M:%S", time.localtime(sample.time))
    return Text(f"native frames as read at {when} (n hides them; n twice reads again)", style="dim")


def rank_text(
    view: RankView | None,
    native: bool = False,
    native_sample: StackSample | None = None,
    sources: SourceFeed | None = None,
) -> Text:
    """The detail of one rank. With `native`, the threads of the native reading replace the
    live Python-only ones once it is there."""
    if view is None:
        return Text("This rank is not in the latest snapshot.", style="dim")
    text = rank_header(view)
    threads = view.threads
    if native:
        text.append("\n")
        text.append_text(native_note(native_sample))
        if native_sample is not None and native_sample.threads:
            threads = native_sample.threads
    if not threads:
        text.append("\n\nNo stack: ", style="bold")
        text.append(printable(view.detail) or "the rank could not be read.")
    for thread in threads:
        text.append("\n\n")
        text.append_text(thread_text(thread, native, sources))
    return text


def frame_files(view: RankView | None, native_sample: StackSample | None) -> list[str]:
    threads = list(view.threads) if view else []
    if native_sample is not None:
        threads += native_sample.threads
    return [f.file for t in threads for f in t.frames if not f.native]


class SourcesRead(Message):
    """Source files a RankDetail asked for were read, and some changed."""


class RankDetail(VerticalScroll):
    """Scrollable text of one rank; `show` is cheap to call every poll.

    Source lines come from `sources`, never from the disk on the UI thread: each `show`
    asks a background thread to read the files of the frames shown (again, if they
    changed since), and the text is drawn anew when they arrive.
    """

    def __init__(self, sources: SourceFeed, native: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.sources = sources
        self.native = native
        self.native_sample: StackSample | None = None
        self._view: RankView | None = None
        self._body = Static(Text("..."), classes="rank-body")
        self._reading = threading.Lock()  # one read at a time per widget

    def compose(self) -> ComposeResult:
        yield self._body

    def show(self, view: RankView | None) -> None:
        self._view = view
        self._body.update(self._text())
        self._read_sources(frame_files(view, self.native_sample))

    def set_native(self, native: bool, sample: StackSample | None = None) -> None:
        self.native = native
        self.native_sample = sample
        self.show(self._view)

    def _read_sources(self, files: list[str]) -> None:
        if not files or not self._reading.acquire(blocking=False):
            return  # the read under way, or the next show, covers it
        sources, post = self.sources, self.post_message

        def read() -> None:
            try:
                if sources.refresh(files):
                    post(SourcesRead())
            finally:
                self._reading.release()

        # A daemon thread: quitting never waits for a file on a slow filesystem.
        threading.Thread(target=read, name="mldebug-sources", daemon=True).start()

    def on_sources_read(self, message: SourcesRead) -> None:
        message.stop()
        self._body.update(self._text())

    def _text(self) -> Text:
        return rank_text(self._view, self.native, self.native_sample, self.sources)

    @property
    def text(self) -> str:
        return self._text().plain
