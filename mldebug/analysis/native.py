"""Native threads across ranks: gdb's view lined up with py-spy's, grouped, and judged.

Pure functions over `NativeDump`s (mldebug.collect.gdb). A live rank's threads are lined up
with py-spy's by OS thread id (py-spy's `os_thread_id` is gdb's LWP), so each native
thread that runs Python carries its Python name and frames. Threads without Python frames
(gloo/NCCL progress threads, the TCPStore, CUDA's) are grouped across ranks by their name
and the frame they wait in, the innermost one outside the C/C++ runtime: "ranks 0-1: 2
pt_gloo_runloop threads wait in gloo::transport::tcp::UnboundBuffer::waitRecv".
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from mldebug.analysis.frames import is_user_frame, user_frame
from mldebug.analysis.snapshot import Look, judged
from mldebug.model import (
    KIND_NATIVE_CRASH,
    KIND_NATIVE_THREADS,
    KIND_PROGRESSING,
    KIND_STUCK,
    KIND_UNREADABLE,
    SEVERITY_ERROR,
    SEVERITY_WARNING,
    STATE_EXITED,
    Finding,
    Frame,
    JobSnapshot,
    NativeDump,
    NativeGroup,
    NativeThread,
    SourceFindings,
    StackSample,
)
from mldebug.ranges import format_ranks

# Frames of the C/C++ runtime a waiting thread sits in (futex, condition variable, epoll):
# where it waits is the innermost frame outside them.
_RUNTIME_FILE = re.compile(
    r"(^|/)(libc\.so|libstdc\+\+\.so|libpthread|ld-linux|libgcc_s)"
    r"|^(\.\.?/)+(nptl|sysdeps|stdlib|csu|misc|io|posix|signal|libio|string|malloc|time)/"
)  # glibc's own sources, as its debug info names them: ./nptl/..., ../sysdeps/...
_RUNTIME_FUNCTION = re.compile(
    r"^(__|_dl_|std::condition_variable::|std::this_thread|pthread_|epoll_|clone|start_thread"
    r"|do_futex_wait|futex_|syscall$|poll$|nanosleep$|raise$|abort$|\?\?$|<signal handler)"
)
# A native thread whose stack passes through these is inside a collective or a
# point-to-point transfer of a communication library.
_COMM_LIBRARY = re.compile(r"(gloo::|nccl|c10d::)", re.IGNORECASE)
_COMM_OP = re.compile(
    r"(allreduce|all_reduce|allgather|all_gather|broadcast|reduce_?scatter|alltoall|barrier"
    r"|waitRecv|waitSend|recv|send|gather|scatter)",
    re.IGNORECASE,
)
_DELIVERY = re.compile(r"(pthread_kill|^__GI_raise$|^raise$|^gsignal$)")
_TRANSFERS = frozenset({"waitrecv", "waitsend", "recv", "send"})
MAX_GROUPS = 200


def is_runtime(frame: Frame) -> bool:
    return bool(_RUNTIME_FILE.search(frame.file) or _RUNTIME_FUNCTION.match(frame.function))


def waits_in(thread: NativeThread) -> Frame | None:
    """The innermost frame outside the C/C++ runtime: where the thread is, in its own code."""
    for frame in reversed(thread.frames):
        if not is_runtime(frame):
            return frame
    return thread.frames[-1] if thread.frames else None


def crash_site(thread: NativeThread) -> tuple[Frame | None, Frame | None]:
    """Where a crashed thread was when the signal came, and its caller: the innermost frame
    outside the signal's delivery (raise, pthread_kill) and any handler that ran on top."""
    frames = thread.frames
    marks = [i for i, f in enumerate(frames) if f.function == "<signal handler called>"]
    below = frames[: marks[0]] if marks else frames
    for index in range(len(below) - 1, -1, -1):
        frame = below[index]
        if not _DELIVERY.search(frame.function) and not is_runtime(frame):
            return frame, below[index - 1] if index > 0 else None
    return (below[-1], None) if below else (None, None)


def entry_of(thread: NativeThread) -> str:
    """The function a thread was started to run: its outermost Python frame of the user's
    code, else its outermost native frame outside the runtime."""
    for frame in thread.python_frames:
        if is_user_frame(frame):
            return frame.function
    for frame in thread.frames:
        if not is_runtime(frame) and frame.function not in ("_start", "main"):
            return frame.function
    return ""


def thread_label(thread: NativeThread) -> str:
    """Its threading name, else its OS name, else (a core keeps no thread names) the
    function it was started to run, in brackets."""
    if thread.python_name or thread.name:
        return thread.python_name or thread.name
    entry = entry_of(thread)
    return f"[{entry}]" if entry else ""


def collective_of(thread: NativeThread) -> str | None:
    """The communication operation a thread's native stack is in (gloo's allreduce ring,
    a waitRecv...), named by its innermost matching frame; None for an idle progress
    thread (a run loop waiting for work)."""
    transfer = None
    for frame in reversed(thread.frames):
        if _COMM_LIBRARY.search(frame.function):
            op = _COMM_OP.search(frame.function.rsplit("::", 1)[-1])
            if op and op.group(1).lower() in _TRANSFERS:
                transfer = transfer or frame.function
            elif op:
                return frame.function  # the collective a waitRecv serves
    return transfer


def align(dump: NativeDump, sample: StackSample | None) -> NativeDump:
    """gdb's threads, each with the Python name and frames py-spy read on the same OS
    thread (py-spy's frames win over py-bt's: they carry the threading name)."""
    if sample is None or not sample.threads or not dump.threads:
        return placed(dump)
    python = {t.os_thread_id: t for t in sample.threads if t.os_thread_id is not None}
    threads = []
    for thread in dump.threads:
        match = python.get(thread.lwp)
        if match is not None:
            frames = tuple(f for f in match.frames if not f.native) or thread.python_frames
            thread = replace(thread, python_frames=frames, python_name=match.name)
        threads.append(thread)
    return placed(replace(dump, threads=tuple(threads)))


def placed(dump: NativeDump) -> NativeDump:
    """The dump with each thread's label and the frame it waits in filled in, for the
    views to show as they are."""
    threads = tuple(
        replace(thread, label=thread_label(thread), waits_in=waits_in(thread))
        for thread in dump.threads
    )
    return replace(dump, threads=threads)


def _key(thread: NativeThread) -> tuple:
    where = waits_in(thread)
    name = thread_label(thread)
    python = thread.python_frames[-1] if thread.python_frames else None
    return (
        name,
        python is not None,
        where.function if where else "",
        where and where.file,
        (python.function, python.file) if python else None,
    )


def group_threads(dumps: Iterable[NativeDump]) -> tuple[NativeGroup, ...]:
    """Every rank's threads grouped by (name, runs Python, frame it waits in): groups with
    a collective first, then by how many ranks share them."""
    found: dict[tuple, list] = {}
    for dump in dumps:
        if dump.rank is None:
            continue
        for thread in dump.threads:
            entry = found.setdefault(_key(thread), [set(), 0, thread])
            entry[0].add(dump.rank)
            entry[1] += 1
    groups = [
        NativeGroup(
            name=key[0],
            python=key[1],
            waits_in=waits_in(first),
            ranks=tuple(sorted(ranks)),
            count=count,
            frames=first.frames,
            python_frames=first.python_frames,
            collective=collective_of(first),
        )
        for key, (ranks, count, first) in found.items()
    ]
    groups.sort(key=lambda g: (g.python, g.collective is None, -len(g.ranks), g.name))
    return tuple(groups[:MAX_GROUPS])


def _label(group: NativeGroup) -> tuple[str, str]:
    """("the pt_gloo_runloop thread", "waits") or ("2 ... threads", "wait"), per rank."""
    per_rank = group.count // max(1, len(group.ranks))
    name = group.name or "unnamed"
    if name.startswith("["):
        name = f"thread running {name[1:-1]}" if per_rank == 1 else f"threads running {name[1:-1]}"
        return (f"{per_rank} {name}", "wait") if per_rank > 1 else (f"the {name}", "waits")
    if per_rank > 1:
        return f"{per_rank} {name} threads", "wait"
    return f"the {name} thread", "waits"


def _short(name: str, limit: int = 80) -> str:
    """A C++ name cut for a sentence (pybind11 instances run to thousands of characters)."""
    return name if len(name) <= limit else name[: limit - 1] + "…"


def _chain(frames: Sequence[Frame], count: int) -> str:
    return " <- ".join(_short(f.function) for f in reversed(frames[-count:]))


def _frame_text(frame: Frame | None, limit: int = 120) -> str:
    if frame is None:
        return "?"
    where = frame.location if frame.line is not None else frame.file.rsplit("/", 1)[-1]
    name = frame.function if len(frame.function) <= limit else frame.function[: limit - 1] + "…"
    return f"{name} ({where})" if where else name


def thread_findings(groups: Sequence[NativeGroup]) -> tuple[Finding, ...]:
    """Threads without Python frames that sit in a collective: a hang's native side."""
    findings = []
    for group in groups:
        if group.python or group.collective is None:
            continue
        ranks = format_ranks(group.ranks)
        label, verb = _label(group)
        inner = group.waits_in.function if group.waits_in else None
        via = "" if group.collective == inner else f", in {group.collective}"
        findings.append(
            Finding(
                KIND_NATIVE_THREADS,
                group.ranks,
                f"rank{'s' if len(group.ranks) > 1 else ''} {ranks}: {label} "
                f"{verb} in {_frame_text(group.waits_in)}{via}",
                recipe="collective-hang",
                severity=SEVERITY_WARNING,
                detail="a thread with no Python frames (gdb): " + _chain(group.frames, 6),
            )
        )
    return tuple(findings)


def crash_findings(dumps: Iterable[NativeDump]) -> tuple[Finding, ...]:
    """The ranks cores say died by a signal: the signal, the crashing thread, where. Ranks
    that died the same way (signal, thread, line, native site) make one finding."""
    found: dict[tuple, list] = {}
    for dump in dumps:
        if dump.core is None or dump.rank is None:
            continue
        crashed = next((t for t in dump.threads if t.crashed), None)
        mine = user_frame(crashed.python_frames) if crashed else None
        native, caller = crash_site(crashed) if crashed else (None, None)
        key = (
            dump.signal,
            thread_label(crashed) if crashed else None,
            mine,
            native and native.function,
            caller and caller.function,
        )
        entry = found.setdefault(key, [[], dump, crashed, mine, native, caller])
        entry[0].append(dump.rank)
    findings = []
    for ranks, dump, crashed, mine, native, caller in found.values():
        ranks = sorted(ranks)
        who = f"rank{'s' if len(ranks) > 1 else ''} {format_ranks(ranks)}"
        how = dump.signal or "a signal"
        if crashed is None:
            findings.append(
                Finding(
                    KIND_NATIVE_CRASH,
                    tuple(ranks),
                    f"{who} died of {how} (core {dump.core})",
                    recipe="native-crash",
                )
            )
            continue
        name = thread_label(crashed)
        thread = f"thread {crashed.lwp}" + (f" ({name})" if name else "")
        if len(ranks) > 1:
            thread = f"the {name} thread" if name else "a thread"
        where = f" at {mine.function} ({mine.location})" if mine else ""
        summary = f"{who} died of {how} in {thread}{where}"
        if native is not None:
            summary += f"; native: {_frame_text(native)}"
            summary += f" called from {_short(caller.function)}" if caller is not None else ""
        findings.append(
            Finding(
                KIND_NATIVE_CRASH,
                tuple(ranks),
                summary,
                location=mine.location if mine else None,
                recipe="native-crash",
                severity=SEVERITY_ERROR,
                detail=f"core {dump.core}: " + _chain(crashed.frames, 8),
            )
        )
    return tuple(findings)


def python_threads(dump: NativeDump, pid: int) -> tuple:
    """(lwp, name, Python frames) of the threads that run Python, main thread first: what a
    core gives the cross-rank verdict in place of py-spy's reading."""
    found = [
        (t.lwp, t.python_name or ("MainThread" if t.lwp == pid else t.name), t.python_frames)
        for t in dump.threads
        if t.python_frames
    ]
    found.sort(key=lambda item: item[0] != pid)
    return tuple(found)


def by_rank(dumps: Iterable[NativeDump]) -> Mapping[int, NativeDump]:
    return {d.rank: d for d in dumps if d.rank is not None}


def core_verdict(look: Look, dumps: Sequence[NativeDump]) -> JobSnapshot:
    """A look built from core files, judged as what it is: every rank in it died (of the
    signal its core names); a verdict over the stacks says why the ranks were where they
    died, and the crashes and the native threads are weighed with it (a rank that "does not
    move" or "could not be read" says nothing of a core)."""
    signals = {d.rank: d for d in dumps}
    snapshot = judged(
        look,
        SourceFindings(
            found=tuple(crash_findings(dumps)) + tuple(thread_findings(group_threads(dumps))),
            replaces=frozenset({KIND_STUCK, KIND_PROGRESSING, KIND_UNREADABLE}),
        ),
    )
    views = tuple(
        replace(
            v,
            state=STATE_EXITED,
            detail=f"died of {signals[v.rank].signal or 'a signal'} (core {signals[v.rank].core})",
        )
        if v.rank in signals
        else v
        for v in snapshot.ranks
    )
    # Dead ranks: their stacks are in the merged tree and in `native`; the table of ranks
    # by stack lists them once, as exited, with their signal and core.
    return replace(snapshot, ranks=views, groups=())
