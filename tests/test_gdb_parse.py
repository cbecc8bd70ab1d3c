"""gdb's batch output parsed: golden files recorded from real processes with the command
mldebug runs (tests/data/gdb/: a torch gloo rank hung in all_reduce, read live; the core of
a rank that called os.abort() in a thread), and hostile text that must stay data."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mldebug.analysis.native import collective_of, group_threads, waits_in
from mldebug.collect import gdbparse
from mldebug.collect.gdb import demangle_names, threads_of
from mldebug.model import NativeDump

DATA = Path(__file__).parent / "data" / "gdb"
MARKER = "@@mldebug-0123456789abcdef"


def test_every_thread_of_a_live_gloo_rank_with_its_name_and_lwp():
    text = (DATA / "live_gloo_rank0.txt").read_text()
    threads, python_bt = threads_of(text, MARKER)
    assert python_bt
    names = {t.name for t in threads}
    assert {"pt_gloo_runloop", "gloo_tcp_loop", "pt_tcpstore_uv", "python"} <= names
    assert len({t.lwp for t in threads}) == len(threads) == 6
    ring = [t for t in threads if waits_in(t) and "waitRecv" in waits_in(t).function]
    assert [t.name for t in ring] == ["pt_gloo_runloop"]
    assert collective_of(ring[0]) == "gloo::(anonymous namespace)::allreduce"
    assert not ring[0].python_frames  # a thread that runs no Python
    main = next(
        t for t in threads if t.python_frames and t.python_frames[-1].function == "all_reduce"
    )
    assert main.frames[0].function == "_start"  # outermost first
    assert main.frames[-1].file == "./nptl/futex-internal.c" and main.frames[-1].line == 57


def test_a_core_says_its_signal_and_its_crashing_thread():
    text = (DATA / "core_abort_rank1.txt").read_text()
    assert not any(t.crashed for t in threads_of(text, MARKER)[0])  # a live read marks none
    threads, _ = threads_of(text, MARKER, core=True)
    crashed = [t for t in threads if t.crashed]
    assert [t.lwp for t in crashed] == [14465]
    assert crashed[0].python_frames[-1].function == "save_checkpoint"
    assert any(f.function == "<signal handler called>" for f in crashed[0].frames)
    prelude = gdbparse.sections(text, MARKER)[""]
    assert gdbparse.terminating_signal(prelude) == "SIGABRT"


def test_frames_with_and_without_address_library_source_and_unknown():
    parse = gdbparse.parse_frame
    frame = parse(
        "0x00007f1bb5b12501 in c10d::ProcessGroupGloo::runLoop(int) () from /x/libtorch_cpu.so"
    )
    assert (frame.function, frame.file, frame.line) == (
        "c10d::ProcessGroupGloo::runLoop",
        "/x/libtorch_cpu.so",
        None,
    )
    frame = parse("pysleep (timeout=<optimized out>) at ./Modules/timemodule.c:2159")
    assert (frame.function, frame.file, frame.line) == ("pysleep", "./Modules/timemodule.c", 2159)
    assert parse("0x0000000000000000 in ?? ()").function == "??"
    assert parse("0x00007f in ?? () from /lib/libstdc++.so.6").file == "/lib/libstdc++.so.6"
    frame = parse(
        "0x1 in gloo::(anonymous namespace)::ring(std::function<void (unsigned long)>) () from /l.so"
    )
    assert frame.function == "gloo::(anonymous namespace)::ring"
    assert parse("__futex_abstimed_wait_common64 (...) at ./nptl/futex-internal.c:57").line == 57


def test_a_thread_name_cannot_fake_a_section_or_a_thread():
    marker = "@@mldebug-feedface"
    text = "\n".join(
        [
            f"{marker} bt",
            'Thread 2 (Thread 0x1 (LWP 12) "@@mldebug-0000 pybt"):',
            "#0  0x1 in evil () from /lib/x.so",
            f"{marker} end",
        ]
    )
    threads, python_bt = threads_of(text, marker)
    assert not python_bt
    assert [(t.lwp, t.name) for t in threads] == [(12, "@@mldebug-0000 pybt")]


@given(st.text(max_size=3000))
def test_any_text_parses_to_bounded_threads_without_raising(text):
    threads = gdbparse.parse_backtraces(text)
    assert len(threads) <= gdbparse.MAX_THREADS
    assert all(len(t.frames) <= gdbparse.MAX_FRAMES for t in threads)
    gdbparse.parse_python_backtraces(text)
    gdbparse.current_thread(text)


def test_native_only_threads_group_across_ranks_by_name_and_place():
    text = (DATA / "live_gloo_rank0.txt").read_text()
    threads, _ = threads_of(text, MARKER)
    dumps = [NativeDump(rank=r, pid=100 + r, threads=threads) for r in (0, 1)]
    groups = group_threads(dumps)
    loop = next(g for g in groups if g.name == "gloo_tcp_loop")
    assert loop.ranks == (0, 1) and loop.count == 2 and not loop.python
    assert groups[0].collective is not None  # the thread in a collective comes first


@pytest.mark.skipif(shutil.which("gdb") is None, reason="needs gdb (.ci/run installs it)")
def test_mangled_names_are_demangled_by_gdb_and_odd_ones_left_alone():
    # gdb reads a torch rank with demangling off (the cost of libtorch's symbols); the few
    # names in the backtraces are demangled afterwards by the real gdb.
    names = demangle_names(
        shutil.which("gdb"),
        ["_ZN4c10d16ProcessGroupGloo7runLoopEi", "epoll_wait", "_Z; shell -ex 'call abort()'"],
    )
    assert names == {"_ZN4c10d16ProcessGroupGloo7runLoopEi": "c10d::ProcessGroupGloo::runLoop(int)"}


def test_hostile_thread_names_and_frames_stay_plain_text():
    from rich.console import Console

    from mldebug.analysis.native import group_threads, placed
    from mldebug.model import Frame, NativeThread
    from mldebug.report.native import dump_text, native_section

    evil = "[bold red]x\x1b]0;pwned\x07"
    thread = NativeThread(
        lwp=7, name=evil, frames=(Frame(evil, "/lib/[link=file:///etc]x.so", None, True),)
    )
    dump = placed(NativeDump(rank=0, pid=7, threads=(thread,)))
    console = Console(record=True, width=200, force_terminal=True)
    console.print(native_section([dump], group_threads([dump])))
    console.print(dump_text(dump))
    shown = console.export_text()
    assert "[bold red]x" in shown and "\x1b]0;" not in shown and "\x07" not in shown
