"""A rank inside torch.compile is compiling, not hung (analysis/compiling.py, agent/compiles.py).

The stacks in tests/data/compiling/ are `py-spy dump --json` of real inductor compiles on this
machine (torch 2.13, CPU, g++): the main thread building C++ (`cpp_builder`), waiting for the
compile pool's builds (`Future.result` under `AsyncCompile.wait`), generating code (inductor's
scheduler), and, once compiled, running the compiled function (`Runner.call` of the generated
module): that one is not compiling.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

import mldebug.rankrules as rankrules
from mldebug.agent.compiles import Compiles
from mldebug.analysis.compiling import (
    compile_caller,
    compile_phase,
    compiling_ranks,
    name_recompiles,
)
from mldebug.analysis.judge import Evidence, judge
from mldebug.collect.agentstate import parse_compile
from mldebug.collect.pyspy import parse_pyspy_json
from mldebug.model import (
    KIND_COMPILING,
    SEVERITY_ERROR,
    SEVERITY_INFO,
    STATE_STUCK,
    STATE_WAITING,
    AgentState,
    CompileProgress,
    Finding,
    Frame,
    RankTarget,
    RankView,
)

pytestmark = pytest.mark.unit
DATA = Path(__file__).parent / "data"


def main_frames(name: str) -> tuple[Frame, ...]:
    return parse_pyspy_json((DATA / "compiling" / name).read_text())[0].frames


@pytest.mark.parametrize(
    ("name", "phase"),
    [
        ("pyspy_inductor_cpp_build.json", "torch._inductor (C++ build)"),
        ("pyspy_inductor_wait_builds.json", "torch._inductor"),
        ("pyspy_inductor_codegen.json", "torch._inductor"),
        ("pyspy_running_compiled.json", None),
    ],
)
def test_recorded_stacks_are_compiling_or_not(name, phase):
    assert compile_phase(main_frames(name)) == phase


def test_the_caller_is_the_users_line_not_inductors_generated_module():
    # The stack passes through a module inductor generated in its cache directory (not a
    # library path); the line that called into the compile is the program's own.
    frames = main_frames("pyspy_inductor_wait_builds.json")
    assert any("/cache1/" in f.file and f.function == "<module>" for f in frames)
    caller = compile_caller(frames)
    assert caller is not None and caller.file == "/tmp/c28/comp.py" and caller.line == 8


def test_importing_torch_dynamo_is_not_compiling():
    # Seen on a real job: importing torch._dynamo runs the bodies of convert_frame.py and
    # symbolic_convert.py; a module's body is its import.
    site = "/venv/lib/python3.11/site-packages/torch/_dynamo/"
    frames = (
        Frame("<module>", "/job/train.py", 52),
        Frame("<module>", site + "convert_frame.py", 62),
        Frame("<module>", site + "symbolic_convert.py", 56),
    )
    assert compile_phase(frames) is None


TORCH = "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"
IN_ALL_REDUCE = (
    Frame("<module>", "/job/train.py", 69),
    Frame("main", "/job/train.py", 58),
    Frame("all_reduce", TORCH, 3252),
)
IN_A_QUEUE = (
    Frame("<module>", "/job/train.py", 69),
    Frame("main", "/job/train.py", 56),
    Frame("wait", "/usr/lib/python3.11/threading.py", 327),
)


def views(rank1: tuple[Frame, ...], agent: AgentState | None = None) -> list[RankView]:
    from mldebug.model import ThreadStack

    def view(rank: int, frames, state: str, agent=None) -> RankView:
        return RankView(
            rank,
            RankTarget(100 + rank, rank, 2),
            state,
            threads=(ThreadStack(1, "MainThread", frames),),
            collective="all_reduce" if state == STATE_WAITING else None,
            agent=agent,
            heartbeat_age=0.5 if agent else None,
        )

    return [view(0, IN_ALL_REDUCE, STATE_WAITING), view(1, rank1, STATE_STUCK, agent)]


def test_a_rank_the_others_wait_for_is_compiling_info_and_no_error():
    compiling = main_frames("pyspy_inductor_wait_builds.json")
    agent = AgentState(1, 101, time=1000.0, compile=CompileProgress(958.0, "x", 2, 3.0, 3.0))
    found = judge(Evidence(views(compiling, agent), world_size=2))
    assert not [f for f in found if f.severity != SEVERITY_INFO]
    first = found[0]
    assert first.kind == KIND_COMPILING and first.ranks == (1,)
    assert first.waiting == (0,)
    assert ("compiling for", "42 s") in first.facts  # 1000 - 958, plus the state's age 0.5
    assert first.location == "/tmp/c28/comp.py:8"


def test_the_same_rank_still_in_its_own_code_stays_an_error():
    found = judge(Evidence(views(IN_A_QUEUE), world_size=2))
    assert found[0].severity == SEVERITY_ERROR
    assert all(f.kind != KIND_COMPILING for f in found)


def test_a_rank_running_compiled_code_is_not_compiling():
    running = main_frames("pyspy_running_compiled.json")
    assert compiling_ranks(views(running)) == {}


def test_the_agent_sees_its_main_thread_compile_begin_go_on_and_end(monkeypatch):
    """A real stack walk: the main thread runs a function whose code lives in a file named
    as dynamo's convert_frame.py, while another thread samples it as the heartbeat does."""
    now = [100.0]
    compiles = Compiles(rankrules, clock=lambda: now[0])
    code = compile(
        "def _compile(inside, leave):\n    inside.set()\n    leave.wait(10)\n",
        "/venv/lib/python3.11/site-packages/torch/_dynamo/convert_frame.py",
        "exec",
    )
    space: dict = {}
    exec(code, space)  # noqa: S102 (a fixed function of this test)
    inside, leave, sampled = threading.Event(), threading.Event(), []

    def heartbeat() -> None:
        inside.wait(10)
        compiles.sample()
        now[0] = 105.0
        compiles.sample()
        sampled.append(compiles.section())
        leave.set()

    import sys

    if "torch._dynamo" not in sys.modules:  # the agent walks only once dynamo is imported
        monkeypatch.setitem(sys.modules, "torch._dynamo", type(sys)("torch._dynamo"))
    thread = threading.Thread(target=heartbeat)
    thread.start()
    space["_compile"](inside, leave)
    thread.join(10)
    assert sampled == [
        {
            "since": 100.0,
            "phase": "torch._dynamo",
            "count": 1,
            "seconds": 0.0,
            "longest": 0.0,
            "ended": None,
        }
    ]
    now[0] = 112.0
    compiles.sample()  # the main thread left the compile
    assert compiles.section() == {
        "since": None,
        "phase": None,
        "count": 1,
        "seconds": 12.0,
        "longest": 12.0,
        "ended": 112.0,
    }


@pytest.mark.parametrize(
    "section",
    [None, [], "x", {"count": True}, {"count": -1}, {"count": "2"}, {}],
)
def test_a_compile_section_that_is_not_one_is_ignored(section):
    assert parse_compile(section) is None


def test_a_hostile_compile_section_is_read_as_plain_bounded_data():
    read = parse_compile(
        {
            "since": "yesterday",
            "phase": "\x1b[31mred\x1b[0m\n" + "x" * 500,
            "count": 3,
            "seconds": float("nan"),
            "longest": -4,
        }
    )
    assert read is not None and read.since is None and read.count == 3
    assert read.phase is not None and "\x1b" not in read.phase and "\n" not in read.phase
    assert len(read.phase) <= 80 and read.seconds == 0.0 and read.longest == 0.0


def _agent_views(counts: dict[int, CompileProgress | None]) -> list[RankView]:
    return [
        RankView(
            r,
            RankTarget(100 + r, r, len(counts)),
            "running",
            agent=AgentState(r, 100 + r, 1.0, compile=c),
        )
        for r, c in counts.items()
    ]


def test_a_straggler_that_recompiles_where_the_others_do_not_is_named_with_it():
    straggler = Finding("straggler", (1,), "rank 1 arrives last", severity="warning")
    once = CompileProgress(None, None, 1, 20.0, 20.0)
    views = _agent_views({0: once, 1: CompileProgress(None, None, 4, 95.0, 40.0), 2: once})
    (named,) = name_recompiles([straggler], views)
    assert ("compiles", "4 (the others at most 1)") in named.facts
    assert "compiled 4 times (95 s in all), the others at most 1: recompiles" in named.then
    # The same counts on every rank: nothing to say; a rank without an agent: not known.
    even = _agent_views({0: once, 1: once, 2: once})
    assert name_recompiles([straggler], even) == [straggler]
    none = _agent_views({0: None, 1: None})
    assert name_recompiles([straggler], none) == [straggler]


MB = 1_000_000
START = 1_700_000_000.0


def _memory_state(rank: int, rising: int, flat: int, compile_section: dict | None):
    """A rank's state.json from its agent's own timeline writer: RSS that rises 1 MB a
    second for `rising` seconds (what inductor loads and builds while it compiles), then
    stays; one point a second as the heartbeat takes them."""
    import json as _json
    import random

    from mldebug.agent.memory_timeline import Timeline
    from mldebug.collect.agentstate import parse_state

    rng, timeline = random.Random(rank), Timeline()
    for i in range(rising + flat):
        value = 400 * MB + MB * min(i, rising) + rng.gauss(0, 0.2 * MB)
        timeline.add(START + i, int(value), None, i * 15, i * 16)
    section = timeline.section()
    section["limits"] = {"host_total": 24 << 30, "host_available": 18 << 30}
    data = {
        "version": 1,
        "rank": rank,
        "pid": 100 + rank,
        "time": START + rising + flat,
        "started": START - 5,
        "memory_timeline": section,
    }
    if compile_section is not None:
        data["compile"] = compile_section
    return parse_state(_json.loads(_json.dumps(data)), rank)


def _growth_of(states) -> list[Finding]:
    from mldebug.analysis.memory import memory_findings

    found = memory_findings(
        [RankView(s.rank, RankTarget(s.pid, s.rank), "running", agent=s) for s in states]
    )
    return [f for f in found if f.kind == "memory_growth"]


def test_memory_a_compile_took_is_a_warm_up_not_a_leak():
    # Seen on the real job (tests/test_compiling_job.py): rank 1's RSS rose for the ~50 s
    # of its compile, and the growth rule named it right after.
    flat = _memory_state(0, 0, 55, None)
    grew = _memory_state(1, 52, 3, None)
    assert [f.ranks for f in _growth_of([flat, grew])] == [(1,)]  # the shape alone: growth
    ended = {"since": None, "count": 1, "seconds": 50.0, "longest": 50.0, "ended": START + 52}
    compiled = _memory_state(1, 52, 3, ended)
    assert _growth_of([flat, compiled]) == []
    under_way = {"since": START + 2, "count": 1, "seconds": 0.0, "longest": 0.0}
    assert _growth_of([flat, _memory_state(1, 55, 0, under_way)]) == []
    # A leak that goes on after the compile ended is still one.
    early = {"since": None, "count": 1, "seconds": 5.0, "longest": 5.0, "ended": START + 5}
    assert [f.ranks for f in _growth_of([flat, _memory_state(1, 55, 0, early)])] == [(1,)]


def test_a_compile_far_longer_than_the_ranks_earlier_ones_is_said_and_stays_info():
    compiling = main_frames("pyspy_inductor_cpp_build.json")

    def told(since: float, longest: float) -> Finding:
        seen = CompileProgress(since, "x", 3, 2 * longest, longest)
        found = judge(Evidence(views(compiling, AgentState(1, 101, 1000.0, compile=seen)), 2))
        return next(f for f in found if f.kind == KIND_COMPILING)

    slow = told(since=700.0, longest=20.0)  # 300 s now, 20 s at most before
    assert slow.severity == SEVERITY_INFO
    assert "far longer than its compiles before (the longest took 20 s)" in slow.summary
    assert ("longest compile before", "20 s") in slow.facts
    usual = told(since=985.0, longest=20.0)  # 15 s now
    assert "far longer" not in usual.summary


def test_torch_compile_importing_inductor_is_compiling_other_imports_are_not():
    # Seen on the real job: `torch.compile(model)` imports torch._inductor.compile_fx (20 s
    # on a loaded machine) before any compile frame runs; rank 0 waited for it.
    site = "/venv/lib/python3.11/site-packages/torch/"
    boot = "<frozen importlib._bootstrap>"
    frames = (
        Frame("main", "/job/train.py", 59),
        Frame("compile", site + "__init__.py", 2836),
        Frame("optimize", site + "_dynamo/eval_frame.py", 1682),
        Frame("_TorchCompileInductorWrapper.get_compiler_config", site + "__init__.py", 2497),
        Frame("_find_and_load", boot, 1176),
        Frame("<module>", site + "_inductor/compile_fx.py", 74),
        Frame("<module>", site + "_inductor/debug.py", 38),
    )
    assert compile_phase(frames) == "torch.compile (set-up)"
    assert compile_caller(frames) == frames[0]
    other = (Frame("main", "/job/train.py", 59), Frame("manual_seed", site + "__init__.py", 9))
    assert compile_phase(other) is None


def test_importing_dynamo_runs_class_bodies_that_are_no_compile():
    # Importing torch._dynamo.symbolic_convert runs its classes' bodies (frames named after
    # the class) and decorators: seen as "compiling" on a real job's start before this rule.
    site = "/venv/lib/python3.11/site-packages/torch/"
    boot = "<frozen importlib._bootstrap>"
    frames = (
        Frame("main", "/job/train.py", 56),
        Frame("SGD.__init__", site + "optim/sgd.py", 30),
        Frame("_find_and_load", boot, 1176),
        Frame("<module>", site + "_dynamo/symbolic_convert.py", 56),
        Frame("InstructionTranslatorBase", site + "_dynamo/symbolic_convert.py", 1200),
        Frame("break_graph_if_unsupported", site + "_dynamo/symbolic_convert.py", 700),
    )
    assert compile_phase(frames) is None


class _Said:
    """A rules module whose stack verdict a test sets: the bookkeeping, apart from the walk."""

    def __init__(self) -> None:
        self.phase: str | None = None

    def compile_phase_in(self, frames) -> str | None:
        list(frames)
        return self.phase


def test_torch_compile_returning_then_compiling_at_the_first_call_is_one_compile(monkeypatch):
    import sys

    if "torch._dynamo" not in sys.modules:
        monkeypatch.setitem(sys.modules, "torch._dynamo", type(sys)("torch._dynamo"))
    said, now = _Said(), [100.0]
    compiles = Compiles(said, clock=lambda: now[0])  # type: ignore[arg-type]

    def beat(at: float, phase: str | None) -> None:
        now[0], said.phase = at, phase
        compiles.sample()

    beat(100.0, "torch.compile (set-up)")
    beat(110.0, None)  # torch.compile(model) returned
    beat(111.0, "torch._dynamo")  # its first call compiles: the same compile
    section = compiles.section()
    assert section is not None and section["since"] == 100.0 and section["count"] == 1
    beat(160.0, None)
    beat(300.0, "torch._dynamo")  # a recompile, minutes later
    beat(320.0, None)
    section = compiles.section()
    assert section is not None
    assert (section["count"], section["seconds"], section["longest"]) == (2, 80.0, 60.0)


def test_a_rank_whose_agent_said_it_exits_is_not_frozen_however_long_its_teardown():
    # Seen on the real job under load: after its last line, rank 1's interpreter teardown
    # (torch, inductor's compile workers) outlasted the frozen threshold, and the watchdog
    # stopped a job that had finished.
    from mldebug.analysis.sequence import is_frozen
    from mldebug.collect.agentstate import parse_state
    from mldebug.model import STATE_RUNNING, ThreadStack

    def view(exiting: bool) -> RankView:
        data = {"version": 1, "rank": 1, "pid": 101, "time": 1000.0, "groups": {}, "trace": []}
        if exiting:
            data["exiting"] = True
        agent = parse_state(data, 1)
        threads = (
            ThreadStack(
                1, "MainThread", (Frame("_shutdown", "/usr/lib/python3.11/threading.py", 1),)
            ),
            ThreadStack(2, "mldebug-heartbeat", ()),
        )
        return RankView(
            1, RankTarget(101, 1, 2), STATE_RUNNING, threads, agent=agent, heartbeat_age=30.0
        )

    assert is_frozen(view(exiting=False))
    assert not is_frozen(view(exiting=True))


def _stack_snapshot(rank1: tuple[Frame, ...]):
    """The real analysis of 3 readings a rank, 0.4 s apart, both ranks idle: rank 0 in
    all_reduce, rank 1 on `rank1` (no agent: the stacks decide)."""
    from mldebug.analysis.snapshot import build_snapshot
    from mldebug.model import StackSample, ThreadStack

    targets = [RankTarget(100 + r, r, 2) for r in (0, 1)]
    samples = {
        t.pid: tuple(
            StackSample(
                t,
                999.2 + 0.4 * i,
                threads=(ThreadStack(1, "MainThread", IN_ALL_REDUCE if t.rank == 0 else rank1),),
                cpu_seconds=10.0,
                main_cpu_seconds=9.0,
            )
            for i in range(3)
        )
        for t in targets
    }
    return build_snapshot(targets, samples, 2, now=1000.0)


@pytest.mark.parametrize("compiling", [True, False])
def test_the_watchdog_says_a_compile_and_never_stops_the_job_for_it(tmp_path, compiling):
    from mldebug.files.rundir import RunPaths
    from mldebug.files.safeio import make_private_dir
    from mldebug.launch.watchdog import ON_HANG_STOP, HangWatchdog
    from mldebug.report.hang import hang_report

    frames = main_frames("pyspy_inductor_cpp_build.json") if compiling else IN_A_QUEUE
    snapshot = _stack_snapshot(frames)
    said: list[str] = []
    stops: list[int] = []
    clock = [0.0]
    watchdog = HangWatchdog(
        RunPaths(make_private_dir(tmp_path / "run")),
        10,
        ON_HANG_STOP,
        render=hang_report,
        alive=lambda: True,
        say=said.append,
        stop=lambda: stops.append(1),
        dump=lambda root: (snapshot, ()),
        clock=lambda: clock[0],
    )
    watchdog.check()
    clock[0] = 11.0
    watchdog.check()
    if not compiling:  # the same job with rank 1 stuck in its own code: a hang, stopped
        assert stops == [1] and len(watchdog.reports) == 1
        return
    assert stops == [] and watchdog.reports == []
    (line,) = said
    assert line.startswith(
        "mldebug: no step or collective for 11s; not a hang: rank 1 is compiling "
        "(torch._inductor (C++ build)); rank 0 waits for it: slow, not hung"
    ), line
    clock[0] = 22.0  # it looks again later, and still does not stop
    watchdog.check()
    assert stops == [] and len(said) == 2


def test_modules_inductor_generates_are_torchs_not_the_users():
    frames = main_frames("pyspy_running_compiled.json")  # Runner.call of the compiled module
    generated = frames[-1]
    assert generated.function == "Runner.call" and "/cache1/2g/c2gn4sui" in generated.file
    assert rankrules.is_library_path(generated.file)
    from mldebug.analysis.frames import user_frame

    found = user_frame(frames)
    assert found is not None and found.file == "/tmp/c28/run_compiled.py"
    # A user's file in a two-letter folder is still the user's.
    assert not rankrules.is_library_path("/home/me/ab/cab.py")
    assert not rankrules.is_library_path("/home/me/ab/c" + "x" * 51 + ".py")


@pytest.mark.parametrize(
    ("seen", "severity"),
    [
        # Seen on the real job: the watchdog looked just after a 5-minute compile ended,
        # rank 0's wait read 299 s, and the job was stopped.
        (CompileProgress(None, None, 1, 295.0, 295.0, ended=999.0), SEVERITY_INFO),
        # its state was written while it still compiled: it ended within the state's age
        (CompileProgress(705.0, "torch._inductor", 1, 0.0, 0.0), SEVERITY_INFO),
        # a minute after its compile: the wait is a hang again
        (CompileProgress(None, None, 1, 295.0, 295.0, ended=940.0), SEVERITY_ERROR),
    ],
)
def test_a_wait_for_a_rank_that_just_finished_compiling_counts_from_its_end(seen, severity):
    agent = AgentState(1, 101, time=1000.0, compile=seen)
    found = judge(Evidence(views(IN_A_QUEUE, agent), world_size=2))
    assert found[0].kind == "outlier" and found[0].ranks == (1,)
    assert found[0].severity == severity
    if severity == SEVERITY_INFO:
        assert found[0].since.startswith("rank 1 finished compiling ")
        assert found[0].since.endswith(" s ago: the wait counts from then")
