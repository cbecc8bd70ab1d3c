"""Readers that meet: several real py-spy reading one real process at the same time.

A process has one ptrace tracer at a time, so a py-spy that comes second is refused (EPERM)
and sees the process in tracing stop. Without collect.readers that read as "ptrace refused"
or "the process is stopped (SIGSTOP, Ctrl-Z, or a debugger holds it)" for a process that was
only busy being read: about a third of 24 readings in 8 threads did, measured on the
2-core machine. These tests run the real py-spy against plain-Python processes (no torch).
"""

from __future__ import annotations

import concurrent.futures
import os
import subprocess

import pytest
from testkit.procs import sitting

from mldebug.collect.pyspy import dump_stack, find_pyspy
from mldebug.collect.readers import busy_detail, reader_of, tracer_pid
from mldebug.model import FAIL_BUSY, RankTarget

SITTER = """
import time
def sit_here():
    print("up", flush=True)
    while True:
        time.sleep(0.01)
sit_here()
"""


@pytest.fixture
def sitter():
    with sitting(SITTER) as proc:
        yield proc


def test_eight_readers_at_once_all_read_the_stack_and_leave_it_running(sitter):
    target = RankTarget(pid=sitter.pid, rank=0)
    pyspy = find_pyspy()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        samples = list(pool.map(lambda _: dump_stack(pyspy, target, timeout=10), range(24)))
    failed = [(s.failure, s.failure_detail) for s in samples if s.failure]
    assert failed == []
    assert all(s.threads[0].frames[-1].function == "sit_here" for s in samples)
    assert tracer_pid(sitter.pid) == 0  # nobody holds it afterwards
    with open(f"/proc/{sitter.pid}/status") as status:
        state = next(line for line in status if line.startswith("State:"))
    assert "T" not in state.split()[1]  # neither stopped nor in tracing stop


def test_a_reader_that_holds_the_rank_all_along_is_named_as_busy(sitter):
    # GIVEN a py-spy of this user that holds the process (`py-spy record` stays attached,
    # pausing it at each sample; --nonblocking would not attach, so it is left out)
    holder = subprocess.Popen(
        [find_pyspy(), "record", "--pid", str(sitter.pid), "--rate", "200", "-o", os.devnull],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # WHEN another reading meets it, many times
        target = RankTarget(pid=sitter.pid, rank=0)
        samples = [dump_stack(find_pyspy(), target, timeout=1.0) for _ in range(10)]
    finally:
        holder.kill()
        holder.wait()
    # THEN each reading either read the stack or said who holds it: never refused or stopped
    for sample in samples:
        assert sample.failure in (None, FAIL_BUSY), sample.failure_detail
        if sample.failure == FAIL_BUSY:
            assert sample.failure_detail == f"busy: being read by PID {holder.pid} (py-spy)"


def test_no_tracer_is_no_reader(sitter):
    assert tracer_pid(sitter.pid) == 0
    assert reader_of(sitter.pid) is None
    assert tracer_pid(2**22 + 1) is None  # no such process


def test_busy_detail_names_the_pid_and_the_tool():
    from mldebug.collect.readers import Reader

    assert busy_detail(Reader(4242, "gdb")) == "busy: being read by PID 4242 (gdb)"
