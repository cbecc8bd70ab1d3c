"""Native threads (gdb) in the report: `--json`'s `native` key and the text section.

Every name and frame comes from a process or a core: shown as plain text, never markup.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.text import Text

from mldebug.model import Frame, NativeDump, NativeGroup, NativeThread
from mldebug.ranges import format_ranks
from mldebug.report.jsonout import fields_json, frame_to_json
from mldebug.textsafe import one_line

SHOWN_FRAMES = 6  # innermost native frames of a group in the text report (all with -v)


def _frames(frames: Sequence[Frame]) -> list[dict]:
    return [frame_to_json(f) for f in frames]


def thread_to_json(thread: NativeThread) -> dict:
    return {
        **fields_json(thread, "lwp", "name"),
        "python_name": thread.python_name or None,
        "crashed": thread.crashed,
        "python": bool(thread.python_frames),
        "frames": _frames(thread.frames),
        "python_frames": _frames(thread.python_frames),
    }


def dump_to_json(dump: NativeDump) -> dict:
    return {
        **fields_json(dump, "rank", "pid", "core", "executable", "signal", "failure"),
        "detail": dump.failure_detail or None,
        "python_bt": dump.python_bt,
        "notes": list(dump.notes),
        "seconds": round(dump.seconds, 3),
        "threads": [thread_to_json(t) for t in dump.threads],
    }


def group_to_json(group: NativeGroup) -> dict:
    return {
        "ranks": list(group.ranks),
        "name": group.name,
        "python": group.python,
        "threads": group.count,
        "waits_in": frame_to_json(group.waits_in) if group.waits_in else None,
        "collective": group.collective,
        "frames": _frames(group.frames),
    }


def native_to_json(dumps: Sequence[NativeDump], groups: Sequence[NativeGroup]) -> dict:
    """`native`: each rank's threads from gdb, and the threads grouped across ranks
    (analysis.native.group_threads)."""
    return {
        "ranks": [dump_to_json(d) for d in dumps],
        "groups": [group_to_json(g) for g in groups],
    }


MAX_FUNCTION = 120  # a pybind11 template instance runs to thousands of characters


def _frame_text(frame: Frame) -> str:
    where = frame.location if frame.line is not None else frame.file.rsplit("/", 1)[-1]
    name = frame.function
    if len(name) > MAX_FUNCTION:
        name = name[: MAX_FUNCTION - 1] + "…"
    return f"{name} ({where})" if where else name


def _runtime(count: int) -> str:
    return f"{count} frame{'s' if count != 1 else ''} of the C runtime's wait: futex, epoll..."


def _group_text(group: NativeGroup, verbose: bool) -> Text:
    per_rank = group.count // max(1, len(group.ranks))
    text = Text(f"[{format_ranks(group.ranks)}] ", style="bold")
    text.append(one_line(group.name or "unnamed"), style="cyan")
    if per_rank > 1:
        text.append(f" x{per_rank}")
    text.append("  python" if group.python else "  native only", style="dim")
    if group.python_frames:
        last = group.python_frames[-1]
        text.append(one_line(f"  in {last.function} ({last.location})"))
    frames = group.frames
    if not verbose and group.waits_in in frames:
        # From where it waits outward; the futex/condvar frames inside say nothing more.
        inner = len(frames) - 1 - frames[::-1].index(group.waits_in)
        hidden = len(frames) - 1 - inner
        frames = frames[max(0, inner + 1 - SHOWN_FRAMES) : inner + 1]
        if hidden:
            text.append(f"\n    ({_runtime(hidden)})", "dim")
    elif not verbose:
        frames = frames[-SHOWN_FRAMES:]
    for frame in reversed(frames):
        text.append("\n    " + one_line(_frame_text(frame)), style="dim" if group.python else "")
    return text


def native_section(
    dumps: Sequence[NativeDump], groups: Sequence[NativeGroup], verbose: bool = False
) -> RenderableType:
    """The text section: notes and failures per rank, then the threads grouped across ranks
    (innermost frame first)."""
    parts: list[RenderableType] = [
        Text(""),
        Text("Native threads (gdb), grouped across ranks; innermost frame first", style="bold"),
    ]
    for dump in dumps:
        head = f"rank {dump.rank}" if dump.rank is not None else f"pid {dump.pid}"
        if dump.failure:
            parts.append(Text(one_line(f"  {head}: not read: {dump.failure_detail}"), "yellow"))
            continue
        what = f"{len(dump.threads)} threads in {dump.seconds:.1f}s"
        if dump.core:
            crashed = next((t for t in dump.threads if t.crashed), None)
            what += f", core {dump.core}, {dump.signal or 'signal ?'}"
            if crashed is not None:
                what += f", crashing thread {crashed.lwp}"
        parts.append(Text(one_line(f"  {head}: {what}"), style="dim"))
        for note in dump.notes:
            parts.append(Text(one_line(f"    {note}"), style="dim"))
    for group in groups:
        parts.append(_group_text(group, verbose))
    return Group(*parts)


def dump_text(dump: NativeDump, max_frames: int = 40) -> Text:
    """One rank's threads from gdb, each with its native frames innermost first (and its
    Python frames, where it runs Python): the TUI's all-threads screen, `dump -v`. Each
    thread's label and place come with it (analysis.native.placed)."""
    text = Text()
    if dump.failure:
        text.append(one_line(f"not read: {dump.failure_detail}"), style="yellow")
        return text
    head = f"{len(dump.threads)} threads, read by gdb in {dump.seconds:.1f}s"
    if dump.signal:
        head += f"; died of {dump.signal}"
    text.append(one_line(head), style="dim")
    for note in dump.notes:
        text.append("\n" + one_line(note), style="dim")
    for thread in dump.threads:
        text.append(f"\n\nThread {thread.lwp}", style="bold")
        text.append(f' "{one_line(thread.label or thread.name)}"', style="bold cyan")
        if thread.python_name:
            text.append(one_line(f"  Python: {thread.python_name}"))
        if thread.crashed:
            text.append("  CRASHED HERE", style="bold red")
        if not thread.python_frames:
            text.append("  native only", style="dim")
        for frame in reversed(thread.python_frames):
            text.append("\n  py " + one_line(f"{frame.function}  {frame.location}"))
        # Native frames from where it waits outward; the runtime's wait frames are counted.
        frames = list(reversed(thread.frames))
        where = thread.waits_in
        inner = frames.index(where) if where in frames else 0
        if inner:
            text.append(f"\n  ({_runtime(inner)})", "dim")
        for frame in frames[inner : inner + max_frames]:
            style = "bold" if frame is where else "dim"
            text.append("\n  " + one_line(_frame_text(frame)), style=style)
        if len(frames) > inner + max_frames:
            text.append(f"\n  ... {len(frames) - inner - max_frames} outer frames", style="dim")
    return text
