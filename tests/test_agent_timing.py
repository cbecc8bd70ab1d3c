"""The agent's timing part (mldebug/agent/timing.py) in this process: a step's wall time
split into collectives, data and host syncs; the real DataLoader timed through the real
hook; the section state.json carries, read back by the collector."""

from __future__ import annotations

import datetime
import io
import os
import pickle
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mldebug import rankrules
from mldebug.agent import collectives, runqueue, timing
from mldebug.collect.agenttiming import parse_timing


def completed_call(tracer, group, seq, entered, done, asynchronous=False):
    call = collectives.Call(group, seq, "all_reduce", None, entered, asynchronous, [], [], None)
    call.completed = done
    return call


class Unread:
    """A kernel that does not count the run-queue delay (not Linux, no schedstat)."""

    def seconds(self):
        return None

    def helpers_delay(self):
        return 0.0

    def scan_helpers(self):
        pass


class Counted:
    """A kernel's counts, given: the training thread's run-queue delay so far, and its
    collectives' threads' since the last step (agent/runqueue.py reads them from /proc)."""

    def __init__(self):
        self.own = 0.0
        self.helpers = 0.0

    def seconds(self):
        return self.own

    def helpers_delay(self):
        helpers, self.helpers = self.helpers, 0.0
        return helpers

    def scan_helpers(self):
        pass


def test_a_step_is_split_into_collectives_data_syncs_and_the_rest():
    part = timing.Timing(None, rankrules, delay=Unread())
    group = collectives.Group("default_pg", 2)
    part.on_step(1, 100.0)  # the first step's start is not known: left out
    part.collective_done(completed_call(None, group, 1, 100.2, 100.5))
    part.collective_done(completed_call(None, group, 2, 100.5, 100.9, asynchronous=True))
    part.data_waited(object(), 0.1, None)
    part.sync_waited(0.05, None)
    part.on_step(2, 101.0)
    section = part.section()
    assert section["steps"] == [[2, 100.0, 1.0, pytest.approx(0.3), 0.1, 0.05]]
    assert [row[:2] for row in section["calls"]] == [["default_pg", 1], ["default_pg", 2]]
    parsed = parse_timing(section)
    assert parsed.steps[0].compute == pytest.approx(0.55)
    assert parsed.steps[0].data_delay is None  # not known: read as before
    assert parsed.calls[1].asynchronous  # async: recorded, not counted as a wait


def test_a_steps_data_wait_says_how_much_of_it_the_kernel_held_the_rank_off_its_cpu():
    # The run-queue delay inside the batch's wait, as the DataLoader hook reads it.
    part = timing.Timing(None, rankrules, delay=Unread())
    part.on_step(1, 100.0)
    part.data_waited(object(), 0.1, None, 0.03)
    part.data_waited(object(), 0.1, None, 0.01)
    part.on_step(2, 101.0)
    (row,) = part.section()["steps"]
    assert row[4:] == [0.2, 0.0, pytest.approx(0.04)]
    (step,) = parse_timing(part.section()).steps
    assert step.data_delay == pytest.approx(0.04) and step.own_data == pytest.approx(0.16)
    # More delay than the wait itself is no reading: the row is left out.
    bad = {"version": 1, "steps": [[2, 100.0, 1.0, 0.3, 0.1, 0.0, 0.2]]}
    assert parse_timing(bad).steps == ()


def test_a_steps_run_queue_delay_is_its_threads_and_its_collectives_threads_while_it_waited():
    counted = Counted()
    part = timing.Timing(None, rankrules, delay=counted)
    group = collectives.Group("default_pg", 2)
    part.on_step(1, 100.0)
    counted.own = 0.05  # held off its CPU 50 ms during the step
    counted.helpers = 0.5  # gloo's threads 500 ms, but the step waited 300 ms in collectives
    part.collective_done(completed_call(None, group, 1, 100.2, 100.5))
    part.on_step(2, 101.0)
    (row,) = part.section()["steps"]
    assert row[6:] == [None, pytest.approx(0.35)]  # no data wait measured; 50 + 300 ms
    (step,) = parse_timing(part.section()).steps
    assert step.delay == pytest.approx(0.35) and step.data_delay is None
    # More than the step itself is no reading.
    bad = {"version": 1, "steps": [[2, 100.0, 1.0, 0.3, 0.1, 0.0, None, 1.5]]}
    assert parse_timing(bad).steps == ()
    # The history's rows carry the steps' median delay (a busier node, analysis/change.py).
    for step in range(3, 12):
        counted.own += 0.01
        part.on_step(step, 100.0 + step)
    rows = part.section()["history"]["rows"]
    assert rows and all(len(r) == 9 for r in rows)
    assert parse_timing(part.section()).history[0].delay == pytest.approx(0.01)


def test_the_collectives_threads_are_found_by_name_in_the_ranks_own_task_folder(tmp_path):
    # A /proc laid out as Linux does (its documented format): the rank's tasks, each with
    # its name and schedstat; only gloo's threads are followed.
    pid = os.getpid()
    for tid, name, rq in (
        (pid, "python", 9),
        (pid + 1, "gloo_tcp_loop", 1_000_000_000),
        (pid + 2, "pt_gloo_runloop", 2_000_000_000),
        (pid + 3, "omp", 7),
    ):
        task = tmp_path / str(pid) / "task" / str(tid)
        task.mkdir(parents=True)
        (task / "comm").write_text(name + "\n")
        (task / "schedstat").write_text(f"100 {rq} 3\n")
    delay = runqueue.RunDelay(root=str(tmp_path))
    delay.scan_helpers()
    assert delay.helper_tids == (pid + 1, pid + 2)
    assert delay.helpers_delay() == 0.0  # the first reading is where they count from
    (tmp_path / str(pid) / "task" / str(pid + 1) / "schedstat").write_text("1 1250000000 4\n")
    assert delay.helpers_delay() == pytest.approx(0.25)
    # A thread that ended is dropped at the next look, its descriptor closed.
    shutil.rmtree(tmp_path / str(pid) / "task" / str(pid + 2))
    delay.scan_helpers()
    assert delay.helper_tids == (pid + 1,) and delay.helpers_delay() == 0.0


def test_the_run_queue_delay_is_the_kernels_count_for_the_calling_thread():
    # Real /proc: the count never goes back, and a thread that shares one CPU with a
    # spinning process waits for it (pinned together, both runnable).
    delay = runqueue.RunDelay()
    first = delay.seconds()
    assert first is not None and first >= 0
    cpu = min(os.sched_getaffinity(0))
    spin = subprocess.Popen(["taskset", "-c", str(cpu), sys.executable, "-c", "while 1: pass"])
    mask = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {cpu})
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            pass
    finally:
        os.sched_setaffinity(0, mask)
        spin.kill()
        spin.wait()
    assert delay.seconds() > first
    # Where the kernel does not count it: None, and the timing reads as before.
    assert runqueue.RunDelay(root=str(Path(__file__).parent)).seconds() is None


def test_the_real_dataloader_is_timed_with_its_dataset_workers_and_line(monkeypatch):
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader, TensorDataset, dataloader

    monkeypatch.setattr(
        dataloader._BaseDataLoaderIter, "__next__", dataloader._BaseDataLoaderIter.__next__
    )
    part = timing.Timing(None, rankrules)
    timing.install_dataloader(dataloader, part)
    loader = DataLoader(TensorDataset(torch.zeros(16, 2)), batch_size=4)
    for _epoch in range(3):
        for _batch in loader:  # LOOP_LINE
            pass
    (entry,) = part.section()["loaders"]
    assert entry["dataset"] == "TensorDataset" and entry["num_workers"] == 0
    assert entry["batches"] == 12 + 3  # the StopIteration of each epoch counts as a wait
    assert entry["site"].startswith(__file__ + ":")
    assert part._data > 0


def test_host_syncs_on_cpu_tensors_are_not_counted(monkeypatch):
    torch = pytest.importorskip("torch")
    for name in timing.SYNC_METHODS:
        monkeypatch.setattr(torch.Tensor, name, getattr(torch.Tensor, name))
    part = timing.Timing(None, rankrules)
    timing.install_syncs(torch, part)
    assert torch.ones(3).sum().item() == 3.0
    assert torch.ones(2).tolist() == [1.0, 1.0]
    assert part._sync == 0.0 and part.section()["syncs"] == []


def test_the_main_thread_is_sampled_where_it_works():
    part = timing.Timing(None, rankrules)
    part.sample_main()
    assert part.section()["work"] == []  # before the first step: set-up, not work
    part.on_step(1, time.time())
    part.sample_main()
    (row,) = part.section()["work"]
    assert row[0].startswith(__file__ + ":")


def test_windows_are_bounded():
    part = timing.Timing(None, rankrules)
    group = collectives.Group("g", 2)
    for seq in range(1, 1000):
        part.collective_done(completed_call(None, group, seq, float(seq), seq + 0.5))
        part.on_step(seq, float(seq))
        part.sync_waited(0.001, None)
    section = part.section()
    assert len(section["calls"]) == timing.MAX_CALLS and len(section["steps"]) == timing.MAX_STEPS


def test_timing_can_be_turned_off():
    assert timing.enabled({}) and not timing.enabled({"MLDEBUG_TIMING": "0"})


def test_torch_s_own_flight_recorder_is_read_through_the_plain_only_unpickler(tmp_path):
    # A real gloo group of one in this process: torch's pickle of its ring, loaded with
    # nothing but plain values allowed, gives the rows (group, number, op, created, step).
    torch = pytest.importorskip("torch")
    import torch.distributed as dist

    from mldebug.agent import timing_flight

    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        started = time.time()
        for _ in range(3):
            dist.all_reduce(torch.ones(4))
        read = timing_flight._dumper()
        assert read is not None
        rows = timing_flight.rows_of(read(), [(started - 1, 7)])
    finally:
        dist.destroy_process_group()
    assert [row[:3] for row in rows[-3:]] == [
        ["default_pg", n, "all_reduce"] for n in (rows[-3][1], rows[-3][1] + 1, rows[-3][1] + 2)
    ]
    assert all(row[3] >= started - 1 and row[4] is None and row[5] == 7 for row in rows[-3:])
    with pytest.raises(Exception, match="not a plain value"):
        timing_flight._PlainOnly(io.BytesIO(pickle.dumps(datetime.date(2026, 12, 1)))).load()


def test_the_flight_recorder_is_read_at_a_bounded_rate_and_rarely_when_the_trace_sees_all():
    from mldebug.agent import timing_flight

    clock = [1000.0]
    reads = []

    def dumper():
        def read():
            reads.append(clock[0])
            entries = [
                {"process_group": ["0", "default_pg"], "collective_seq_id": seq,
                 "profiling_name": "gloo:all_reduce", "time_created_ns": int(seq * 1e9)}
                for seq in range(1, 11)
            ]  # fmt: skip
            return {"entries": entries}

        return read

    part = timing_flight.FlightCalls(dumper=dumper, clock=lambda: clock[0])
    starts = list
    empty = timing_flight.FlightCalls(dumper=lambda: lambda: {"entries": []}, clock=lambda: 0.0)
    empty.maybe_read({}, starts)
    assert empty._next == timing_flight.READ_EVERY  # an empty ring: looked at again soon
    for _ in range(25):  # 25 heartbeats a second apart; the trace saw 2 of the 10
        part.maybe_read({"default_pg": 2}, starts)
        clock[0] += 1
    assert reads == [1000.0, 1010.0, 1020.0]  # at multiples of READ_EVERY on the wall clock
    assert len(part.rows) == 10 and part.rows[0][:3] == ["default_pg", 1, "all_reduce"]
    for _ in range(200):  # now the trace counts as far as the ring: probed once a minute
        part.maybe_read({"default_pg": 10}, starts)
        clock[0] += 1
    assert reads[3:] == [1030.0, 1080.0, 1140.0, 1200.0]
    assert part.rows == []
