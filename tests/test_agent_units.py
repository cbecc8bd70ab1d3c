"""The in-rank agent's parts, one by one, in this process (no torch: fakes stand in for it).

The CUDA paths are tested with fakes of `torch.cuda` fed the real data recorded on an
H200 in tests/data/gpu/memory/ (memory_stats.json, memory_summary.txt, the OOM message,
the allocator snapshot, the NVML readings): this machine has no GPU.
"""

from __future__ import annotations

import errno
import importlib.machinery
import json
import os
import pickle
import re
import subprocess
import sys
import textwrap
import threading
import time
import types
from pathlib import Path

import pytest

import mldebug
from mldebug import rankrules
from mldebug.agent import collectives, eventlog, heartbeat, importhook, memory, steps, timing
from mldebug.collect.agentstate import parse_state, with_run_delay_now
from mldebug.files import safeio
from mldebug.launch import env as envs

GPU_DATA = Path(__file__).parent / "data" / "gpu" / "memory"


@pytest.fixture
def event_log(tmp_path, monkeypatch):
    """events.jsonl of a fake rank 3, fresh for each test; returns a reader of its lines."""
    path = tmp_path / "events.jsonl"
    monkeypatch.setattr(eventlog, "_writer", None)
    monkeypatch.setattr(eventlog, "_failed", set())
    monkeypatch.setattr(eventlog, "_faults", frozenset())
    eventlog.configure(path, 3, safeio.open_append, lambda: 7)

    def lines():
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines()]

    return lines


# ---------------------------------------------------------------------------- events


def test_events_are_json_lines_with_time_rank_kind_step_and_fields(event_log):
    assert eventlog.emit("memory_growth", "RSS grew", rate=1024.0, what="rss")
    (line,) = event_log()
    assert line["rank"] == 3 and line["kind"] == "memory_growth" and line["step"] == 7
    assert line["message"] == "RSS grew" and line["rate"] == 1024.0 and line["what"] == "rss"
    assert abs(line["time"] - time.time()) < 60


def test_events_stop_at_1000_lines_and_say_so_in_the_last(event_log, tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_text('{"kind": "oom"}\n' * 10)  # a restarted rank appends to its predecessor
    for i in range(1200):
        eventlog.emit("nonfinite", f"event {i}")
    lines = event_log()
    assert len(lines) == eventlog.MAX_LINES
    assert lines[-1]["kind"] == "truncated" and "1,000 lines" in lines[-1]["message"]
    assert lines[-2]["message"] == f"event {eventlog.MAX_LINES - 12}"


def test_a_failing_part_is_said_once_as_agent_error_and_on_stderr(event_log, capsys):
    eventlog.fail("memory", RuntimeError("boom"))
    eventlog.fail("memory", RuntimeError("again"))
    lines = event_log()
    assert [(e["kind"], e["part"]) for e in lines] == [("agent_error", "memory")]
    assert "RuntimeError: boom" in lines[0]["message"]
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("mldebug agent: memory: RuntimeError: boom")


def test_events_without_a_writer_do_nothing(monkeypatch):
    monkeypatch.setattr(eventlog, "_writer", None)
    assert eventlog.emit("oom", "x") is False


def test_an_events_file_that_cannot_be_written_loses_lines_quietly(tmp_path, monkeypatch, capsys):
    """A full disk is not the agent's failure: nothing on the program's stderr, and the
    next event tries again."""
    monkeypatch.setattr(eventlog, "_writer", None)
    path = tmp_path / "events.jsonl"
    path.mkdir()  # a directory where the file should be
    eventlog.configure(path, 0, safeio.open_append)
    assert eventlog.emit("oom", "x") is False and eventlog.emit("oom", "y") is False
    assert capsys.readouterr().err == ""
    path.rmdir()
    assert eventlog.emit("oom", "z") is True
    assert [json.loads(x)["message"] for x in path.read_text().splitlines()] == ["z"]


def test_non_finite_numbers_in_an_event_are_written_as_strings(event_log):
    assert eventlog.emit("nonfinite", "inf", trail=[["blocks.1", float("inf")]], x=float("nan"))
    (line,) = event_log()
    assert line["trail"] == [["blocks.1", "inf"]] and line["x"] == "nan"


# ---------------------------------------------------------------------------- import hooks


def test_a_post_import_hook_runs_before_the_import_statement_returns(
    tmp_path, monkeypatch, event_log
):
    (tmp_path / "h6_target.py").write_text("def work():\n    return 'original'\n")
    (tmp_path / "h6_user.py").write_text("from h6_target import work\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []

    def patch(module):
        seen.append(module.__name__)
        module.work = lambda: "patched"

    importhook.when_imported("h6_target", patch, "test")
    try:
        import h6_user  # imports h6_target, then takes a reference to its function

        assert seen == ["h6_target"] and h6_user.work() == "patched"
        assert "exec_module" not in vars(sys.modules["h6_target"].__loader__)  # put back
        importhook.when_imported("h6_target", lambda m: seen.append("now"), "test")
        assert seen == ["h6_target", "now"]  # already imported: at once
    finally:
        for name in ("h6_target", "h6_user"):
            sys.modules.pop(name, None)
    assert event_log() == []


def test_a_failing_import_hook_is_reported_and_the_import_goes_on(tmp_path, monkeypatch, event_log):
    (tmp_path / "h6_broken_hook.py").write_text("VALUE = 5\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    def bad(module):
        raise ValueError("hook bug")

    importhook.when_imported("h6_broken_hook", bad, "collectives")
    try:
        import h6_broken_hook

        assert h6_broken_hook.VALUE == 5
    finally:
        sys.modules.pop("h6_broken_hook", None)
    (line,) = event_log()
    assert line["kind"] == "agent_error" and "ValueError: hook bug" in line["message"]


# ---------------------------------------------------------------------------- collectives


class FakeTensor:
    def __init__(self, *shape, dtype="torch.float32", is_cuda=False):
        self.shape = shape
        self.dtype = dtype
        self.is_cuda = is_cuda


class FakeGroup:
    def __init__(self, ranks, name):
        self.ranks, self.group_name = ranks, name

    def size(self):
        return len(self.ranks)


class FakeWork:
    def __init__(self):
        self.done = False

    def is_completed(self):
        return self.done

    def wait(self):  # the agent must never call it
        raise AssertionError("the agent waited on a Work")


def fake_c10d(world_size=2):
    world = FakeGroup(list(range(world_size)), "0")
    c10d = types.SimpleNamespace(
        _world=types.SimpleNamespace(default_pg=world),
        ProcessGroup=FakeGroup,
        Work=FakeWork,
        get_process_group_ranks=lambda pg: pg.ranks,
    )
    return c10d, world


def make_tracer(cuda=None):
    tracer = collectives.Tracer(rankrules)
    c10d, world = fake_c10d()
    tracer.bind(c10d, types.SimpleNamespace(Tensor=FakeTensor, cuda=cuda))
    return tracer, world


def traced(tracer, op, fn):
    return collectives.wrap(tracer, op, fn)


def all_reduce(tensor, op=None, group=None, async_op=False):
    return FakeWork() if async_op else None


def test_calls_get_a_sequence_per_group_with_op_shapes_dtypes_and_the_callers_line(event_log):
    tracer, world = make_tracer()
    reduce = traced(tracer, "all_reduce", all_reduce)
    sub = FakeGroup([0, 1], "1")
    hashed = FakeGroup([4, 5, 6, 9], "9f2c1d")
    reduce(FakeTensor(1024))
    line = sys._getframe().f_lineno - 1
    reduce(FakeTensor(2, 3, dtype="torch.bfloat16"), group=sub)
    reduce(FakeTensor(8), None, hashed)
    reduce(FakeTensor(8), group=world)
    groups, trace = tracer.snapshot()
    assert sorted(groups) == ["1", "default_pg", "ranks:4-6,9"]
    assert groups["default_pg"]["enqueued"]["seq"] == 2 and groups["default_pg"]["size"] == 2
    assert [(e["group"], e["seq"]) for e in trace] == [
        ("default_pg", 1),
        ("1", 1),
        ("ranks:4-6,9", 1),
        ("default_pg", 2),
    ]
    first = trace[0]
    assert first["site"] == f"{__file__}:{line}" and first["op"] == "all_reduce"
    assert (first["shapes"], first["dtypes"], first["async"]) == ([[1024]], ["float32"], False)
    assert first["completed"] >= first["enqueued"]
    assert trace[1]["shapes"] == [[2, 3]] and trace[1]["dtypes"] == ["bfloat16"]
    assert event_log() == []


def test_calls_made_inside_a_traced_call_are_not_counted():
    tracer, _ = make_tracer()
    inner = traced(tracer, "all_gather", lambda tensor_list, tensor, group=None: None)
    outer = traced(
        tracer, "all_gather_object", lambda objs, obj, group=None: inner([], FakeTensor(1))
    )
    outer([None, None], 5)
    _, trace = tracer.snapshot()
    assert [(e["op"], e["seq"]) for e in trace] == [("all_gather_object", 1)]


def test_an_async_call_completes_when_its_work_does_and_holds_back_later_calls():
    tracer, _ = make_tracer()
    reduce = traced(tracer, "all_reduce", all_reduce)
    work = reduce(FakeTensor(4), async_op=True)
    reduce(FakeTensor(4))  # synchronous, done at return, but after the pending one
    tracer.poll()
    groups, trace = tracer.snapshot()
    assert groups["default_pg"]["enqueued"]["seq"] == 2
    assert "completed" not in groups["default_pg"]  # call 1 is still pending
    assert trace[0]["async"] is True and trace[0]["completed"] is None
    assert trace[1]["completed"] is not None
    work.done = True
    tracer.poll()
    groups, trace = tracer.snapshot()
    assert groups["default_pg"]["completed"]["seq"] == 2 and trace[0]["completed"] is not None


def test_isend_and_batches_wait_for_all_their_works_and_name_the_peer():
    tracer, _ = make_tracer()
    isend = traced(tracer, "isend", lambda tensor, dst=None, group=None, tag=0: FakeWork())
    batch = traced(tracer, "batch_isend_irecv", lambda ops: [FakeWork(), FakeWork()])
    isend(FakeTensor(3), 1).done = True
    op = types.SimpleNamespace(tensor=FakeTensor(5), group=None)
    works = batch([op, op])
    works[0].done = True
    tracer.poll()
    _, trace = tracer.snapshot()
    assert trace[0]["peer"] == 1 and trace[0]["completed"] is not None
    assert trace[1]["op"] == "batch_isend_irecv" and trace[1]["shapes"] == [[5], [5]]
    assert trace[1]["completed"] is None
    works[1].done = True
    tracer.poll()
    assert tracer.snapshot()[1][1]["completed"] is not None


def test_a_synchronous_call_on_cuda_tensors_completes_when_its_stream_gets_there():
    """NCCL returns from a synchronous call before the data moved: a CUDA event recorded
    on the current stream after it says when it did (fake torch.cuda.Event)."""
    recorded = []

    class Event:
        def __init__(self):
            self.reached = False

        def record(self, stream=None):
            recorded.append(self)

        def query(self):
            return self.reached

    tracer, _ = make_tracer(cuda=types.SimpleNamespace(Event=Event))
    reduce = traced(tracer, "all_reduce", all_reduce)
    reduce(FakeTensor(4, is_cuda=True))
    tracer.poll()
    assert tracer.snapshot()[1][0]["completed"] is None
    recorded[0].reached = True
    tracer.poll()
    assert tracer.snapshot()[0]["default_pg"]["completed"]["seq"] == 1


def test_an_exception_reaches_the_program_unchanged_and_ends_the_call():
    tracer, _ = make_tracer()
    error = RuntimeError("Timed out waiting 1800000ms")

    def failing(tensor, group=None, async_op=False):
        raise error

    reduce = traced(tracer, "all_reduce", failing)
    with pytest.raises(RuntimeError) as raised:
        reduce(FakeTensor(1))
    assert raised.value is error
    groups, trace = tracer.snapshot()
    assert trace[0]["error"] == "RuntimeError: Timed out waiting 1800000ms"
    assert groups["default_pg"]["completed"]["seq"] == 1


def test_calls_torch_would_refuse_or_skip_are_not_traced():
    tracer, _ = make_tracer()
    reduce = traced(tracer, "all_reduce", all_reduce)
    reduce(FakeTensor(1), group=-100)  # GroupMember.NON_GROUP_MEMBER
    tracer.c10d._world.default_pg = None  # no process group yet: torch raises itself
    reduce(FakeTensor(1))
    assert tracer.snapshot() == ({}, [])


def test_a_failing_trace_stops_itself_and_the_call_goes_on(event_log, monkeypatch):
    tracer, _ = make_tracer()
    reduce = traced(tracer, "all_reduce", lambda tensor, group=None, async_op=False: "result")
    reduce(FakeTensor(1))
    monkeypatch.setattr(eventlog, "_faults", frozenset({"collectives"}))
    assert reduce(FakeTensor(1)) == "result"
    assert reduce(FakeTensor(1)) == "result"
    assert tracer.off and tracer.snapshot() == ({}, [])  # a frozen trace would mislead
    assert [e["kind"] for e in event_log()] == ["agent_error"]


def test_install_wraps_c10d_and_its_torch_distributed_aliases_but_not_deprecated_ones(monkeypatch):
    c10d = types.ModuleType("fake_c10d")
    package = types.ModuleType("torch.distributed")

    def barrier(group=None, async_op=False):
        return None

    def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op=False):
        return None

    all_gather_into_tensor.__deprecated__ = "use all_gather_single"
    c10d.barrier = package.barrier = barrier
    c10d.all_gather_into_tensor = all_gather_into_tensor
    c10d.__dict__.update(fake_c10d()[0].__dict__)
    monkeypatch.setitem(sys.modules, "torch.distributed", package)
    tracer = collectives.Tracer(rankrules)
    assert collectives.install(c10d, tracer) == ["barrier"]
    assert c10d.barrier is package.barrier and c10d.barrier is not barrier
    assert c10d.barrier.__name__ == "barrier" and c10d.barrier.__code__.co_name == "barrier"
    assert c10d.all_gather_into_tensor is all_gather_into_tensor
    assert collectives.install(c10d, tracer) == []  # never wrapped twice
    c10d.barrier()
    assert tracer.snapshot()[1][0]["op"] == "barrier"


def test_group_names_of_many_ranks_stay_short_and_the_same_everywhere():
    assert collectives.format_ranks([3, 1, 2, 7]) == "ranks:1-3,7"
    long = collectives.format_ranks(range(0, 4000, 2))
    assert long.startswith("ranks:2000#") and long == collectives.format_ranks(range(0, 4000, 2))


def test_a_long_run_of_calls_keeps_the_trace_bounded_and_every_call_counted():
    # What a step costs is benchmarks/bench_agent.py's (a real DDP loop, with and without
    # the agent); here: 20,000 calls are all counted, and the trace kept stays bounded.
    tracer, _ = make_tracer()
    reduce = traced(tracer, "all_reduce", all_reduce)
    tensor = FakeTensor(1024)
    for _ in range(20_000):
        reduce(tensor)
    groups, trace = tracer.snapshot()
    assert groups["default_pg"]["enqueued"]["seq"] == 20_000
    assert 0 < len(trace) <= 1_000 and trace[-1]["seq"] == 20_000


# ---------------------------------------------------------------------------- steps


def test_steps_count_iterations_when_several_optimizers_step_in_each(event_log):
    moved = []
    counter = steps.Steps(on_change=lambda step, when: moved.append(step))
    generator, discriminator = object(), object()
    for _ in range(3):
        counter.optimizer_stepped(generator, (), {})
        counter.optimizer_stepped(discriminator, (), {})
    assert counter.value == 3 and moved == [1, 2, 3] and counter.time is not None


def test_the_programs_own_step_wins_over_optimizer_steps():
    counter = steps.Steps()
    optimizer = object()
    counter.optimizer_stepped(optimizer)
    counter.set(40)
    counter.set()
    counter.optimizer_stepped(optimizer)
    assert counter.value == 41


def test_a_failing_step_hook_never_reaches_optimizer_step(event_log, monkeypatch):
    counter = steps.Steps()
    monkeypatch.setattr(eventlog, "_faults", frozenset({"steps"}))
    counter.optimizer_stepped(object())
    counter.optimizer_stepped(object())
    assert counter.value is None and counter.off
    assert [e["part"] for e in event_log()] == ["steps"]


def test_mldebug_step_outside_a_rank_does_nothing_and_checks_its_argument(monkeypatch):
    monkeypatch.delitem(sys.modules, "_mldebug_agent", raising=False)
    assert mldebug.step() is None and mldebug.step(5) is None
    for bad, error in ((-1, ValueError), (1.5, TypeError), (True, TypeError), ("3", TypeError)):
        with pytest.raises(error):
            mldebug.step(bad)
    calls = []
    monkeypatch.setitem(sys.modules, "_mldebug_agent", types.SimpleNamespace(set_step=calls.append))
    mldebug.step(9)
    mldebug.step()
    assert calls == [9, None]


# ---------------------------------------------------------------------------- memory


def fake_torch_cuda(stats, initialized=True, **extra):
    cuda = types.SimpleNamespace(
        is_initialized=lambda: initialized,
        memory_stats=lambda device=None: stats,
        **extra,
    )
    return types.SimpleNamespace(cuda=cuda, _C=types.SimpleNamespace())


def test_cuda_figures_come_from_the_recorded_memory_stats_of_an_h200():
    stats = json.loads((GPU_DATA / "memory_stats.json").read_text())
    torch = fake_torch_cuda(stats)
    reading = memory.Memory(torch_of=lambda: torch).reading(nvml=False)
    assert reading["rss"] > 0
    assert reading["cuda"] == {
        "allocated": stats["allocated_bytes.all.current"],
        "reserved": stats["reserved_bytes.all.current"],
        "max_allocated": stats["allocated_bytes.all.peak"],
        "max_reserved": stats["reserved_bytes.all.peak"],
        "num_ooms": stats["num_ooms"],
        "num_alloc_retries": stats["num_alloc_retries"],
        "inactive_split": stats["inactive_split_bytes.all.current"],
    }
    assert reading["cuda"]["allocated"] == 875078656


def test_cuda_figures_are_the_ranks_gpus_not_the_heartbeat_threads_current_device():
    """memory_stats() of the device with memory reserved (recorded figures on device 2)."""
    stats = json.loads((GPU_DATA / "memory_stats.json").read_text())
    asked = []

    def memory_stats(device=None):
        asked.append(device)
        return stats if device == 2 else {"reserved_bytes.all.current": 0}

    torch = fake_torch_cuda(None, device_count=lambda: 4)
    torch.cuda.memory_stats = memory_stats
    mem = memory.Memory(torch_of=lambda: torch)
    assert mem.reading(nvml=False)["cuda"]["allocated"] == 875078656
    assert asked == [0, 1, 2, 3] and mem.device == 2
    assert mem.reading(nvml=False)["cuda"]["allocated"] == 875078656 and asked[-1] == 2


def test_cuda_is_never_read_before_the_program_initialised_it():
    def stats(device=None):
        raise AssertionError("memory_stats would initialise CUDA")

    torch = fake_torch_cuda(None, initialized=False)
    torch.cuda.memory_stats = stats
    assert memory.Memory(torch_of=lambda: torch).reading()["cuda"] is None
    assert memory.Memory(torch_of=lambda: None).reading()["cuda"] is None


def test_nvml_gives_this_processs_used_memory_from_the_recorded_readings(monkeypatch):
    recorded = json.loads((GPU_DATA / "nvml.json").read_text())
    me = recorded["processes"][0]
    pynvml = types.ModuleType("pynvml")
    pynvml.__spec__ = importlib.machinery.ModuleSpec("pynvml", None)
    pynvml.nvmlInit = lambda: None
    pynvml.nvmlDeviceGetHandleByUUID = lambda uuid: ("handle", uuid)
    pynvml.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(total=recorded["total"])
    pynvml.nvmlDeviceGetComputeRunningProcesses = lambda h: [
        types.SimpleNamespace(
            pid=os.getpid() if p["pid"] == me["pid"] else p["pid"] + 1, usedGpuMemory=p["used"]
        )
        for p in recorded["processes"]
    ]
    monkeypatch.setitem(sys.modules, "pynvml", pynvml)
    stats = json.loads((GPU_DATA / "memory_stats.json").read_text())
    torch = fake_torch_cuda(
        stats,
        current_device=lambda: 0,
        get_device_properties=lambda i: types.SimpleNamespace(uuid="5a1b-..."),
    )
    reading = memory.Memory(torch_of=lambda: torch).reading()
    assert reading["nvml"] == {"used": me["used"], "total": recorded["total"]}
    pynvml.nvmlDeviceGetComputeRunningProcesses = lambda h: []  # another pid namespace
    reading = memory.Memory(torch_of=lambda: torch).reading()
    assert reading["nvml"] == {"used": None, "total": recorded["total"]}


def run_steps(mem, values, start_step=1, spacing=0.2):
    """Steps `start_step`... each `spacing` seconds apart, with RSS `values`."""
    sizes = iter(values)
    mem._rss_of = lambda: next(sizes)
    for i in range(len(values)):
        mem.on_step(start_step + i, 1000.0 + i * spacing)


def test_memory_that_grows_at_every_step_is_an_event_once(event_log):
    mem = memory.Memory(torch_of=lambda: None)
    run_steps(mem, [300 << 20] * 3 + [(300 << 20) + i * (1 << 20) for i in range(1, 14)])
    (line,) = event_log()
    assert line["kind"] == "memory_growth" and line["what"] == "rss"
    assert line["rate"] == 1 << 20 and "1.0 MiB per step" in line["message"]
    assert len(mem.history_rows()) == 16 and mem.history_rows()[0][0] == 1


def test_flat_or_noisy_memory_is_no_event(event_log):
    mem = memory.Memory(torch_of=lambda: None)
    base = 300 << 20
    run_steps(mem, [base + (i % 3) * (200 << 10) for i in range(40)])
    run_steps(memory.Memory(torch_of=lambda: None), [base + i * 4096 for i in range(40)])
    assert event_log() == []


def test_steps_closer_than_the_sample_interval_share_a_row():
    mem = memory.Memory(torch_of=lambda: None, rss_of=lambda: 1)
    for step in range(1, 101):
        mem.on_step(step, 1000.0 + step * 0.001)
    assert [row[0] for row in mem.history_rows()] == [1]


def oom_torch(tmp_path, snapshot):
    """A fake torch whose CUDA initialises on demand and runs the queued calls, as
    torch.cuda._lazy_call does, with the recorded summary and snapshot."""
    observers, queued = [], []
    summary = (GPU_DATA / "memory_summary.txt").read_text()
    stats = json.loads((GPU_DATA / "oom_memory_stats.json").read_text())
    torch = fake_torch_cuda(
        stats,
        _lazy_call=queued.append,
        memory_summary=lambda device=None: summary,
        memory=types.SimpleNamespace(_snapshot=lambda: snapshot),
    )
    torch._C._cuda_attach_out_of_memory_observer = observers.append
    return torch, observers, queued, summary


def test_a_cuda_oom_leaves_the_summary_and_snapshot_and_an_event(tmp_path, event_log):
    """Fed the summary and allocator snapshot recorded on a real H200, and the figures of
    its real OOM message ('Tried to allocate 400.00 GiB ... of which 138.40 GiB is free')."""
    snapshot = pickle.loads((GPU_DATA / "memory_snapshot.pickle").read_bytes())
    torch, observers, queued, summary = oom_torch(tmp_path, snapshot)
    mem = memory.Memory(rank_dir=str(tmp_path), safeio=safeio, torch_of=lambda: torch)
    mem.watch_oom(torch.cuda)
    assert observers == [] and len(queued) == 1  # attached when CUDA initialises, not before
    queued[0]()
    message = (GPU_DATA / "oom_message.txt").read_text()
    asked = float(re.search(r"Tried to allocate ([\d.]+) GiB", message).group(1))
    free = float(re.search(r"of which ([\d.]+) GiB is free", message).group(1))
    observers[0](0, int(asked * 2**30), 1 << 30, int(free * 2**30))
    assert (tmp_path / "memory_summary.txt").read_text() == summary
    assert pickle.loads((tmp_path / "memory_snapshot.pickle").read_bytes()) == snapshot
    torch.cuda.memory_summary = lambda device=None: "a later summary"
    observers[0](0, 8 << 30, 1 << 30, 2 << 30)
    assert (tmp_path / "memory_summary.txt").read_text() == summary  # the first one's
    first, second = event_log()
    assert first["kind"] == "oom" and first["requested"] == 400 << 30
    assert (
        "allocating 400.0 GiB" in first["message"] and "memory_snapshot.pickle" in first["message"]
    )
    assert first["files"] == ["memory_summary.txt", "memory_snapshot.pickle"]
    assert "of the first one kept" in second["message"]


def test_an_oom_without_recorded_history_writes_no_snapshot(tmp_path, event_log):
    torch, observers, queued, _ = oom_torch(tmp_path, {"segments": [], "device_traces": [[]]})
    mem = memory.Memory(rank_dir=str(tmp_path), safeio=safeio, torch_of=lambda: torch)
    mem.watch_oom(torch.cuda)
    queued[0]()
    observers[0](0, 1 << 30, 0, 0)
    assert not (tmp_path / "memory_snapshot.pickle").exists()
    assert event_log()[0]["files"] == ["memory_summary.txt"]


# ---------------------------------------------------------------------------- heartbeat


def beat(path, write_json=safeio.write_json_atomic, interval=0.05):
    tracer, _ = make_tracer()
    reduce = traced(tracer, "all_reduce", all_reduce)
    reduce(FakeTensor(8))
    counter = steps.Steps()
    counter.set(12)
    mem = memory.Memory(torch_of=lambda: None)
    mem.on_step(12, time.time())
    return heartbeat.Heartbeat(path, write_json, 3, 1000.0, tracer, counter, mem, interval)


def test_the_state_round_trips_through_the_reader(tmp_path):
    hb = beat(tmp_path / "state.json")
    assert hb.write_once()
    data = json.loads((tmp_path / "state.json").read_text())
    state = parse_state(data, 3)
    assert state.pid == os.getpid() and state.step == 12 and state.interval == 0.05
    assert state.started == 1000.0 and state.memory.rss > 0
    (group,) = state.groups
    assert (group.group, group.size, group.enqueued.seq, group.completed.seq) == (
        "default_pg",
        2,
        1,
        1,
    )
    assert state.trace[0].shapes == ((8,),) and state.trace[0].site.startswith(__file__)
    assert state.memory_history[0][0] == 12


def test_the_state_says_how_long_the_writing_and_main_threads_waited_for_a_cpu(tmp_path):
    # Linux counts a thread's run-queue delay (schedstat): the reader compares it with its
    # value now, to tell a starved node's late heartbeat from a frozen rank.
    hb = beat(tmp_path / "state.json")
    assert hb.write_once()
    data = json.loads((tmp_path / "state.json").read_text())
    said = data["beat"]
    assert said["tid"] == threading.get_native_id()
    assert said["run_delay"] >= 0 and said["main_run_delay"] >= 0
    read = with_run_delay_now(data, os.getpid())
    assert read["beat"]["run_delay_now"] >= said["run_delay"]
    waited = parse_state(read, 3).waited_for_cpu
    assert waited is not None and 0 <= waited < 5  # an idle machine's moment, not seconds
    # What a file says it waited "now" is not believed: only /proc's reading is.
    planted = {**data, "beat": {**said, "run_delay_now": 1e6, "main_run_delay_now": 1e6}}
    assert parse_state(with_run_delay_now(planted, os.getpid()), 3).waited_for_cpu < 5
    # Another process's state (its pid is not the target's) gets nothing read.
    assert "run_delay_now" not in with_run_delay_now(data, os.getpid() + 1)["beat"]


def test_a_wait_the_other_threads_counted_since_the_beat_explains_a_late_heartbeat(tmp_path):
    # A thread's run-queue count grows only once it gets a CPU again: on a starved node
    # the heartbeat's thread and the main thread may still be waiting, uncounted, while the
    # rank's other threads ran in turn and show the wait. The state lists them.
    stop = threading.Event()
    other = threading.Thread(target=stop.wait, name="loader")
    other.start()
    try:
        hb = beat(tmp_path / "state.json")
        assert hb.write_once()
        data = json.loads((tmp_path / "state.json").read_text())
        listed = dict(data["beat"]["threads"])
        assert other.native_id in listed and threading.get_native_id() not in listed
        assert os.getpid() not in listed  # the main thread has its own key
        now = listed[other.native_id]
        # As if the thread had waited 7 s for a CPU since the beat: its count then was lower.
        waited = {other.native_id: now - 7.0}
        beat_then = {**data["beat"], "threads": [[t, waited.get(t, d)] for t, d in listed.items()]}
        state = parse_state(with_run_delay_now({**data, "beat": beat_then}, os.getpid()), 3)
        assert state.waited_for_cpu is not None and state.waited_for_cpu >= 7.0
        # Threads that are not this process's, garbage, and entries past the bound are not read.
        junk = [[1, -100.0], ["x", 0], [other.native_id], None, *([[os.getpid(), 1e9]] * 20)]
        noisy = {**data["beat"], "threads": [*junk, [other.native_id, now - 7.0]]}
        state = parse_state(with_run_delay_now({**data, "beat": noisy}, os.getpid()), 3)
        assert state.waited_for_cpu is not None and state.waited_for_cpu < 5
    finally:
        stop.set()
        other.join()


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_the_state_says_how_long_the_main_thread_waited_for_a_cpu_in_its_step(tmp_path):
    # GIVEN a rank counting its steps on its main thread, timed (agent/timing.py)
    path = tmp_path / "state.json"
    timed = timing.Timing()
    counter = steps.Steps(on_change=timed.on_step)
    counter.set(1)
    hb = heartbeat.Heartbeat(path, safeio.write_json_atomic, 3, 1000.0, None, counter, None,
                             timing=timed)  # fmt: skip
    # WHEN its main thread then has to share its one CPU with a spinning process
    cpu = min(os.sched_getaffinity(0))
    kept = os.sched_getaffinity(0)
    rival = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        os.sched_setaffinity(rival.pid, {cpu})
        os.sched_setaffinity(0, {cpu})
        _spin(0.5)
    finally:
        os.sched_setaffinity(0, kept)
        rival.kill()
        rival.wait()
    assert hb.write_once()
    data = json.loads(path.read_text())
    # THEN the state says the main thread's count at the step's start, and the reader the
    # seconds it waited for a CPU since (read from /proc now, never from the file)
    said = data["beat"]
    assert 0 <= said["step_main_run_delay"] < said["main_run_delay"]
    waited = parse_state(with_run_delay_now(data, os.getpid()), 3).step_waited_for_cpu
    assert waited is not None and waited > 0
    planted = {**data, "beat": {**said, "main_run_delay_now": 1e6}}
    assert parse_state(with_run_delay_now(planted, os.getpid()), 3).step_waited_for_cpu < 5
    # AND a step counted on another thread gives no count to compare the main thread's with
    other = threading.Thread(target=counter.set, args=(2,))
    other.start()
    other.join()
    assert hb.write_once()
    assert "step_main_run_delay" not in json.loads(path.read_text())["beat"]


def test_the_heartbeat_thread_moves_time_and_ends_at_once(tmp_path):
    path = tmp_path / "state.json"
    hb = beat(path)
    hb.start()
    deadline = time.time() + 10
    while not path.exists() and time.time() < deadline:
        time.sleep(0.01)
    first = json.loads(path.read_text())["time"]
    while json.loads(path.read_text())["time"] == first and time.time() < deadline:
        time.sleep(0.01)
    assert json.loads(path.read_text())["time"] > first
    hb.stop()
    assert not hb._thread.is_alive()
    # A heartbeat of a minute is cut short by stop(), not waited out (a bound, not a timing).
    slow = beat(tmp_path / "slow.json", interval=60.0)
    slow.start()
    while not (tmp_path / "slow.json").exists() and time.time() < deadline:
        time.sleep(0.01)
    start = time.monotonic()
    slow.stop()
    assert time.monotonic() - start < 30 and not slow._thread.is_alive()


def test_a_full_disk_skips_heartbeats_and_says_so_once_in_events(tmp_path, event_log, capsys):
    full = [True]

    def write_json(path, data):
        if full[0]:
            raise OSError(errno.ENOSPC, "No space left on device")
        safeio.write_json_atomic(path, data)

    hb = beat(tmp_path / "state.json", write_json)
    assert not hb.write_once() and not hb.write_once()
    full[0] = False
    assert hb.write_once()
    (line,) = event_log()
    assert line["part"] == "heartbeat" and "No space left on device" in line["message"]
    assert capsys.readouterr().err == ""  # the disk is no news to the program


@pytest.mark.parametrize(
    "value, expected", [(None, 1.0), ("0.5", 0.5), ("0", 1.0), ("x", 1.0), ("nan", 1.0)]
)
def test_heartbeat_interval_from_the_environment(value, expected):
    env = {} if value is None else {heartbeat.ENV_INTERVAL: value}
    assert heartbeat.interval_from(env) == expected


# ---------------------------------------------------------------------------- in a process


def test_a_rank_without_torch_writes_its_state_and_exits_without_waiting(tmp_path):
    """The agent in a real hooked process: nothing heavy imported, state.json written
    (no collectives, no step), and exit is not held up by the heartbeat thread."""
    env = {**os.environ, **envs.hook_env(dict(os.environ), tmp_path / "run", envs.MODE_NATIVE)}
    env.update({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MLDEBUG_HEARTBEAT": "30"})
    code = textwrap.dedent(
        """
        import sys, time
        import mldebug
        mldebug.step(4)
        print(sorted(m for m in ("torch", "rich", "textual") if m in sys.modules))
        """
    )
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=60)
    took = time.monotonic() - start
    assert done.returncode == 0 and done.stdout == b"[]\n" and done.stderr == b"", done.stderr
    state = parse_state(json.loads((tmp_path / "run/ranks/0/state.json").read_text()), 0)
    assert state.step == 4 and state.groups == () and state.interval == 30.0
    assert took < 20  # a heartbeat of 30 s never delays the exit
