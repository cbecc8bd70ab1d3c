"""`mldebug run`'s straggler line (mldebug/launch/stragglers.py) on run directories holding
simulated agents' state files (tests/timing_sim.py, the agent's format), judged by the real
analysis: said once when the same rank is named at two checks in a row, not again while it
flickers, again only after a quiet spell."""

from __future__ import annotations

import json

from timing_sim import simulate

from mldebug.files.rundir import RunPaths
from mldebug.launch.changes import ChangeWatch
from mldebug.launch.stragglers import PERSIST, QUIET, WAIT_HOT, SharedViews, StragglerWatch


def write(paths: RunPaths, states: list[dict]) -> None:
    for state in states:
        folder = paths.state_file(state["rank"]).parent
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        paths.state_file(state["rank"]).write_text(json.dumps(state))


def test_the_line_is_said_once_then_again_only_after_a_quiet_spell(tmp_path):
    root = tmp_path / "run"
    root.mkdir(mode=0o700)
    paths = RunPaths(root)
    said: list[str] = []
    watch = StragglerWatch(paths, said.append)
    slow = simulate(world=4, slow_rank=1, factor=1.5, jitter=0.1, steps=30)
    healthy = simulate(world=4, jitter=0.1, steps=30, seed=4)
    write(paths, slow)
    assert watch.check() is None  # once is not yet persistent
    line = watch.check()
    assert line is not None and line.startswith("mldebug: rank 1 is the straggler: ")
    assert line.endswith("(mldebug recipes stragglers; MLDEBUG_STRAGGLER=0 silences this line)")
    events = [json.loads(x) for x in paths.events_file(1).read_text().splitlines()]
    assert [(e["kind"], e["rank"]) for e in events] == [("straggler", 1)]
    # A few looks without it (a window between two Flight Recorder reads), then it again.
    write(paths, healthy)
    for _ in range(QUIET - 1):
        assert watch.check() is None
    write(paths, slow)
    assert watch.check() is None and watch.check() is None
    assert len(said) == 1
    # A real quiet spell: news again.
    write(paths, healthy)
    for _ in range(QUIET):
        watch.check()
    write(paths, slow)
    watch.check()
    assert watch.check() is not None and len(said) == 2


def test_the_line_waits_a_few_looks_for_the_line_the_straggler_works_at(tmp_path):
    # Right after the first steps the heartbeat may not have seen the rank's work yet.
    root = tmp_path / "run"
    root.mkdir(mode=0o700)
    paths = RunPaths(root)
    said: list[str] = []
    watch = StragglerWatch(paths, said.append)
    slow = simulate(world=4, slow_rank=1, factor=1.5, jitter=0.1, steps=30)
    for state in slow:
        state["timing"]["work"] = []
    write(paths, slow)
    assert [watch.check() for _ in range(PERSIST + WAIT_HOT - 1)] == [None] * 4
    write(paths, simulate(world=4, slow_rank=1, factor=1.5, jitter=0.1, steps=30))
    line = watch.check()
    assert line is not None and "its main thread is mostly at /home/ana/job/train.py:48" in line
    # Never seen: said all the same, a few looks later.
    watch = StragglerWatch(paths, said.append)
    write(paths, slow)
    lines = [watch.check() for _ in range(PERSIST + WAIT_HOT)]
    assert lines[:-1] == [None] * 4 and lines[-1] is not None


def test_the_straggler_and_slowdown_checks_share_one_reading_of_the_states(tmp_path):
    # Each state is some 100 KB of JSON, rewritten every heartbeat: the launcher's two
    # checks read them once between them (launch/stragglers.py SharedViews).
    root = tmp_path / "run"
    root.mkdir(mode=0o700)
    paths = RunPaths(root)
    write(paths, simulate(world=4, slow_rank=1, factor=1.5, jitter=0.1, steps=30))
    now = [100.0]
    shared = SharedViews(paths, clock=lambda: now[0])
    first = shared.views(1.8)
    assert [v.rank for v in first] == [0, 1, 2, 3] and shared.reads == 1
    now[0] += 1.0  # the other check, a second later: the same reading
    assert shared.views(1.8) is first and shared.reads == 1
    now[0] += 1.0  # the first check again, a period later: read anew
    write(paths, simulate(world=4, jitter=0.1, steps=30, seed=4))
    again = shared.views(1.8)
    assert again is not first and shared.reads == 2
    # Both checks judge what they were given.
    said: list[str] = []
    watch = StragglerWatch(paths, said.append, shared=shared)
    changes = ChangeWatch(paths, said.append, shared=shared)
    assert watch.check(first) is None and watch.check(first) is not None
    assert changes.check(again) is None and shared.reads == 2
