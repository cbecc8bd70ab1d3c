"""The verdict from the ranks' agents: state.json files (written here as docs/agent.md says the
agent writes them, standing in for the agent) read by the real reader, and stack samples built
by hand as tests/test_findings.py does; the analysis is the real one (build_snapshot).

The case the agent exists for: on NCCL a rank's all_reduce returns at once and the rank waits
later, spinning at `.item()`: its stack shows no collective and it burns CPU, so the stacks
alone say the job is working.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace

import pytest
from testkit.agent_states import (
    LOAD,
    MODULE,
    NOW,
    SITE,
    SPIN,
    TRAIN,
    call,
    heartbeat_state,
    pid_of,
    samples,
    snapshot,
    state,
    write_run,
)
from testkit.pyspy_fakes import fake_pyspy, sleepers, stop

from mldebug.analysis.snapshot import build_snapshot
from mldebug.collect.agentstate import read_states
from mldebug.model import (
    KIND_FROZEN,
    KIND_HANG,
    KIND_MISMATCH,
    KIND_OUTLIER,
    KIND_PROGRESSING,
    KIND_RENDEZVOUS,
    KIND_THREADS,
    SEVERITY_ERROR,
    SEVERITY_INFO,
    SEVERITY_WARNING,
    STATE_RUNNING,
    STATE_STUCK,
    STATE_UNKNOWN,
    STATE_WAITING,
    AgentState,
    CollectiveCall,
    Frame,
    GroupProgress,
    RankTarget,
    StackSample,
    ThreadStack,
)
from mldebug.recipes import get_recipe
from mldebug.report.jsonout import snapshot_to_json
from mldebug.report.text import render_text
from mldebug.wording import finding_text


def nccl_job(tmp_path, rank2_made: dict | None, **kwargs):
    """Ranks 0, 1 and 3 made all_reduce #38 (async) 30 s ago and spin at .item(); rank 2 is
    busy in load_batch and its last call is `rank2_made`."""
    states = {r: state(r, call(38), 37) for r in (0, 1, 3)}
    states[2] = state(2, rank2_made, rank2_made["seq"] if rank2_made else None, time=NOW - 0.3)
    stacks = {0: SPIN, 1: SPIN, 2: LOAD, 3: SPIN}
    return snapshot(tmp_path, states, stacks, **kwargs)


def test_without_states_the_spinning_ranks_read_as_progressing(tmp_path):
    # GIVEN the NCCL job's stacks alone (no agent): everyone burns CPU, nobody is in a collective
    stacks = {0: SPIN, 1: SPIN, 2: LOAD, 3: SPIN}
    snap = snapshot(tmp_path, {}, stacks)
    # THEN the stacks say the job works: the reason the agent exists
    assert [f.kind for f in snap.findings] == [KIND_PROGRESSING]


def test_the_rank_that_never_made_the_call_is_the_culprit_with_its_line(tmp_path):
    snap = nccl_job(tmp_path, call(37, enqueued=NOW - 31, completed=NOW - 30.5))
    first = snap.findings[0]
    assert first.kind == KIND_OUTLIER and first.severity == SEVERITY_ERROR
    assert first.ranks == (2,)
    assert first.location == f"{TRAIN}:31"
    assert first.recipe == "rank-outside-collective"
    assert first.summary.startswith(f"rank 2 never called all_reduce #38 ({SITE}); ")
    assert f"it is at {TRAIN}:31 in load_batch" in first.summary
    assert first.summary.endswith("while ranks 0-1,3 wait for it")
    assert [p.ranks for p in first.parts] == [(2,), (0, 1, 3)]
    assert KIND_PROGRESSING not in [f.kind for f in snap.findings]
    # The spinning ranks wait, whatever their stacks and CPU show; the culprit works.
    states = {v.rank: v.state for v in snap.ranks}
    assert states == {0: STATE_WAITING, 1: STATE_WAITING, 2: STATE_RUNNING, 3: STATE_WAITING}
    waiting = snap.ranks[0]
    assert waiting.collective == "all_reduce"
    assert "all_reduce #38" in waiting.detail


def test_a_rank_several_calls_behind_is_named_with_how_many(tmp_path):
    snap = nccl_job(tmp_path, call(35, enqueued=NOW - 60, completed=NOW - 59))
    first = snap.findings[0]
    assert first.kind == KIND_OUTLIER and first.ranks == (2,)
    assert f"never called all_reduce #38 ({SITE}): 3 calls behind, its last was " in first.summary
    assert f"all_reduce #35 ({SITE})" in first.summary


def test_a_rank_that_made_no_call_at_all_is_behind_too(tmp_path):
    snap = nccl_job(tmp_path, None)
    first = snap.findings[0]
    assert first.kind == KIND_OUTLIER and first.ranks == (2,)
    assert "it has made no call on it yet" in first.summary


def test_a_wait_of_one_heartbeat_is_a_warning_and_a_call_in_transit_nothing(tmp_path):
    # GIVEN the others made #38 1.5 s before their last heartbeat (interval 1 s)
    states = {r: state(r, call(38, enqueued=NOW - 2), 37) for r in (0, 1, 3)}
    states[2] = state(2, call(37, enqueued=NOW - 3, completed=NOW - 2.9), 37, time=NOW - 0.3)
    stacks = {0: SPIN, 1: SPIN, 2: LOAD, 3: SPIN}
    snap = snapshot(tmp_path, states, stacks)
    assert snap.findings[0].kind == KIND_OUTLIER
    # A wait this short is a pause, not a hang: info at most (analysis.severity, issue 20)
    assert snap.findings[0].severity == SEVERITY_INFO
    assert finding_text(snap.findings[0]).endswith("a pause that short is not a hang)")
    # GIVEN they made it 0.2 s before: a call in transit, as in any healthy job
    states.update({r: state(r, call(38, enqueued=NOW - 0.7), 37) for r in (0, 1, 3)})
    snap = snapshot(tmp_path, states, stacks)
    assert [f.kind for f in snap.findings] == [KIND_PROGRESSING]
    assert all(v.state == STATE_RUNNING for v in snap.ranks)


def test_the_culprits_state_older_than_the_wait_is_a_warning(tmp_path):
    # Rank 2 last wrote its state before the others made #38: it may have made it since.
    states = {r: state(r, call(38, enqueued=NOW - 30), 37) for r in (0, 1, 3)}
    states[2] = state(2, call(37, enqueued=NOW - 40), 37, time=NOW - 35)
    snap = snapshot(tmp_path, states, {0: SPIN, 1: SPIN, 2: LOAD, 3: SPIN})
    outlier = next(f for f in snap.findings if f.kind == KIND_OUTLIER)
    assert outlier.ranks == (2,) and outlier.severity == SEVERITY_WARNING
    assert outlier.summary.startswith(
        f"rank 2 never called all_reduce #38 ({SITE}) as far as its agent last wrote, 35 s ago; "
    )


def test_ranks_whose_call_number_n_differs_are_a_mismatch(tmp_path):
    # Rank 1 made a barrier as its call #5, the others an all_reduce: all wait, forever.
    states = {r: state(r, call(5), 4) for r in (0, 2, 3)}
    barrier = f"{TRAIN}:60"
    states[1] = state(1, call(5, op="barrier", site=barrier, shapes=[], dtypes=[]), 4)
    snap = snapshot(tmp_path, states, {0: SPIN, 1: SPIN, 2: SPIN, 3: SPIN})
    first = snap.findings[0]
    assert first.kind == KIND_MISMATCH and first.severity == SEVERITY_ERROR
    assert first.ranks == (0, 1, 2, 3)
    assert first.recipe == "mismatched-collectives"
    assert {(p.ranks, p.label, p.location) for p in first.parts} == {
        ((0, 2, 3), "all_reduce #5", SITE),
        ((1,), "barrier #5", barrier),
    }
    assert first.location == barrier  # the smaller side
    assert (
        "rank 1 calls barrier" in first.summary and "ranks 0,2-3 call all_reduce" in first.summary
    )
    assert [f.kind for f in snap.findings] == [KIND_MISMATCH]


def test_the_same_call_with_other_shapes_is_a_mismatch(tmp_path):
    states = {r: state(r, call(9), 8) for r in (0, 1, 2)}
    states[3] = state(3, call(9, shapes=[[2048]]), 8)
    snap = snapshot(tmp_path, states, {r: SPIN for r in range(4)})
    first = snap.findings[0]
    assert first.kind == KIND_MISMATCH and first.ranks == (0, 1, 2, 3)
    assert "different tensors" in first.summary
    assert "rank 3 calls all_reduce of float32[2048]" in first.summary


def test_a_past_mismatch_in_the_trace_is_found_by_its_number(tmp_path):
    # Call #3 was an all_reduce on three ranks and a broadcast on rank 0; all completed #4.
    def trace(op3):
        return [call(3, op=op3, completed=NOW - 50), call(4, completed=NOW - 40)]

    states = {
        r: state(r, call(4, completed=NOW - 40), 4, trace=trace("all_reduce")) for r in (1, 2, 3)
    }
    states[0] = state(0, call(4, completed=NOW - 40), 4, trace=trace("broadcast"))
    snap = snapshot(tmp_path, states, {r: SPIN for r in range(4)})
    mismatch = next(f for f in snap.findings if f.kind == KIND_MISMATCH)
    assert mismatch.severity == SEVERITY_WARNING  # nobody waits in it now
    assert "call #3" in mismatch.summary and "rank 0 calls broadcast" in mismatch.summary


def test_everyone_waiting_in_the_same_call_and_none_behind_is_a_hang(tmp_path):
    states = {r: state(r, call(38), 37) for r in range(4)}
    snap = snapshot(tmp_path, states, {r: SPIN for r in range(4)})
    (finding,) = snap.findings
    assert finding.kind == KIND_HANG and finding.severity == SEVERITY_ERROR
    assert finding.ranks == (0, 1, 2, 3) and finding.location == SITE
    assert "none is behind" in finding.summary


def test_a_rank_without_an_agent_is_judged_by_its_stack(tmp_path):
    # Rank 2 has no state.json (not started by mldebug run): the stacks name it.
    states = {r: state(r, call(38), 37) for r in (0, 1, 3)}
    snap = snapshot(tmp_path, states, {0: SPIN, 1: SPIN, 2: LOAD, 3: SPIN})
    first = snap.findings[0]
    assert first.kind == KIND_OUTLIER and first.ranks == (2,)
    assert first.severity == SEVERITY_ERROR
    assert first.location == f"{TRAIN}:31"
    assert "never reached all_reduce" in first.summary


def test_point_to_point_groups_are_not_compared_by_number(tmp_path):
    # Pipeline stages: rank 0 sends, rank 1 receives; their counts differ by design.
    states = {0: state(0, call(7, op="send"), 6), 1: state(1, call(3, op="recv"), 3)}
    snap = snapshot(tmp_path, states, {0: SPIN, 1: LOAD})
    assert [f.kind for f in snap.findings] == [KIND_PROGRESSING]


def test_a_living_rank_whose_heartbeat_stopped_is_frozen(tmp_path):
    healthy = call(12, completed=NOW - 1, enqueued=NOW - 1.2)
    states = {r: state(r, healthy, 12) for r in (0, 1, 3)}
    states[2] = state(2, call(12, completed=NOW - 31), 12, time=NOW - 30)
    stacks = {0: SPIN, 1: SPIN, 2: LOAD, 3: SPIN}
    snap = snapshot(tmp_path, states, stacks)
    first = snap.findings[0]
    assert first.kind == KIND_FROZEN and first.severity == SEVERITY_ERROR
    assert first.ranks == (2,) and first.recipe == "frozen-rank"
    assert first.location == f"{TRAIN}:31"
    assert "heartbeat stopped 30 s ago" in first.summary
    assert KIND_PROGRESSING not in [f.kind for f in snap.findings]
    assert snap.ranks[2].heartbeat_age == pytest.approx(30.0)


def test_frozen_waits_for_max_of_10_s_and_5_heartbeats(tmp_path):
    healthy = call(12, completed=NOW - 1, enqueued=NOW - 1.2)
    stacks = {0: SPIN, 1: LOAD}
    # 9 s without a heartbeat at the default 1 s: not yet (10 s is the least)
    states = {0: state(0, healthy, 12), 1: state(1, healthy, 12, time=NOW - 9)}
    assert KIND_FROZEN not in [f.kind for f in snapshot(tmp_path, states, stacks).findings]
    # 15 s at a 4 s heartbeat: not yet (5 x 4 = 20 s); 25 s: frozen
    states[1] = state(1, healthy, 12, time=NOW - 15, interval=4.0)
    assert KIND_FROZEN not in [f.kind for f in snapshot(tmp_path, states, stacks).findings]
    states[1] = state(1, healthy, 12, time=NOW - 25, interval=4.0)
    assert KIND_FROZEN in [f.kind for f in snapshot(tmp_path, states, stacks).findings]


def test_a_heartbeat_late_because_the_node_starves_its_threads_is_not_frozen(tmp_path):
    # GIVEN rank 2's heartbeat 30 s old, as in the frozen rank's test
    healthy = call(12, completed=NOW - 1, enqueued=NOW - 1.2)
    states = {r: state(r, healthy, 12) for r in (0, 1, 3)}
    states[2] = state(2, call(12, completed=NOW - 31), 12, time=NOW - 30)
    stacks = {0: SPIN, 1: SPIN, 2: LOAD, 3: SPIN}
    root = write_run(tmp_path, states)
    targets = [RankTarget(pid=pid_of(r), rank=r, world_size=4, run_dir=str(root)) for r in stacks]
    by_pid = {pid_of(r): samples(r, frames) for r, frames in stacks.items()}
    agents = read_states(targets)

    def kinds(waited: float) -> list[str]:
        late = {**agents, pid_of(2): replace(agents[pid_of(2)], waited_for_cpu=waited)}
        snap = build_snapshot(targets, by_pid, world_size=4, agents=late, now=NOW)
        return [f.kind for f in snap.findings]

    # WHEN its threads waited 25 of those seconds for a CPU (a starved node): not frozen
    assert KIND_FROZEN not in kinds(25.0)
    # WHEN they waited 5 s: still 25 s without a heartbeat that could have run: frozen
    assert kinds(5.0)[0] == KIND_FROZEN


def test_a_state_of_another_pid_is_ignored(tmp_path):
    # A file left by an earlier process of rank 2, or planted: it names another pid.
    snap_states = {r: state(r, call(38), 37) for r in (0, 1, 3)}
    snap_states[2] = state(2, call(50), 49, pid=99999)
    snap = snapshot(tmp_path, snap_states, {0: SPIN, 1: SPIN, 2: LOAD, 3: SPIN})
    assert snap.ranks[2].agent is None and snap.ranks[2].step is None
    assert snap.ranks[2].heartbeat_age is None
    assert snap.ranks[0].agent is not None and snap.ranks[0].step == 12
    # Rank 2's stack is what judges it: the others wait for it, it never reached all_reduce.
    first = snap.findings[0]
    assert first.kind == KIND_OUTLIER and first.ranks == (2,)


def test_a_rank_whose_agent_thread_is_gone_is_not_frozen(tmp_path):
    # The agent stepped aside (its thread ended): the process runs, its state goes stale.
    healthy = call(12, completed=NOW - 1, enqueued=NOW - 1.2)
    states = {0: state(0, healthy, 12), 1: state(1, healthy, 12, time=NOW - 60)}
    root = write_run(tmp_path, states)
    targets = [RankTarget(pid=pid_of(r), rank=r, run_dir=str(root)) for r in (0, 1)]
    by_pid = {pid_of(0): samples(0, SPIN), pid_of(1): samples(1, LOAD)}
    by_pid[pid_of(1)] = [replace(s, threads=s.threads[:1]) for s in by_pid[pid_of(1)]]
    snap = build_snapshot(targets, by_pid, 2, agents=read_states(targets), now=NOW)
    kinds = [f.kind for f in snap.findings]
    assert KIND_FROZEN not in kinds and KIND_PROGRESSING in kinds
    # What shows instead: rank 1 lacks the thread rank 0 runs.
    assert snap.findings[0].kind == KIND_THREADS and snap.findings[0].ranks == (1,)


def test_a_stale_state_of_a_rank_that_exited_is_not_frozen(tmp_path):
    states = {0: state(0, call(4, completed=NOW - 60), 4, time=NOW - 60)}
    states[1] = state(1, call(4, completed=NOW - 60), 4, time=NOW - 60)
    root = write_run(tmp_path, states)
    targets = [RankTarget(pid=pid_of(r), rank=r, run_dir=str(root)) for r in (0, 1)]
    gone = [StackSample(targets[1], NOW, failure="exited", failure_detail="gone")]
    by_pid = {pid_of(0): samples(0, LOAD), pid_of(1): gone}
    snap = build_snapshot(targets, by_pid, 2, agents=read_states(targets), now=NOW)
    frozen = [f for f in snap.findings if f.kind == KIND_FROZEN]
    assert [f.ranks for f in frozen] == [(0,)]


def test_states_in_a_run_directory_others_may_write_are_not_read(tmp_path):
    root = write_run(tmp_path, {0: state(0, call(3), 2)})
    target = RankTarget(pid=pid_of(0), rank=0, run_dir=str(root))
    assert set(read_states([target])) == {pid_of(0)}
    os.chmod(root, 0o777)
    assert read_states([target]) == {}


def test_states_are_read_once_per_target_and_only_for_ranks(tmp_path):
    root = write_run(tmp_path, {0: state(0, call(3), 2), 1: state(1, call(3), 2)})
    targets = [
        RankTarget(pid=pid_of(0), rank=0, run_dir=str(root)),
        RankTarget(pid=pid_of(1), rank=None, run_dir=str(root)),  # no rank: no file to read
        RankTarget(pid=pid_of(5), rank=1),  # the job's run directory, given apart
    ]
    states = read_states(targets, run_dir=str(root))
    assert set(states) == {pid_of(0), pid_of(5)}
    assert states[pid_of(5)].rank == 1


def test_the_frozen_rank_recipe_ships():
    recipe = get_recipe("frozen-rank")
    assert recipe is not None and recipe.body.startswith("# ")
    assert "thread apply all bt" in recipe.body and "--native" in recipe.body


def test_json_gives_each_ranks_step_heartbeat_and_collectives(tmp_path):
    trace = [call(seq, completed=NOW - 60 + seq) for seq in range(28, 38)] + [call(38)]
    states = {r: state(r, call(38), 37, trace=trace) for r in (0, 1, 3)}
    # (rank 1's all_reduce #37 raised: a call a peer's exit broke, as its agent records it)
    raised = call(37, completed=NOW - 23, error="Connection closed by peer")
    states[1] = state(1, call(38), 37, trace=[*trace[:-2], raised, trace[-1]])
    states[2] = state(2, call(37, completed=NOW - 30), 37, time=NOW - 0.25, step=None)
    report = snapshot_to_json(snapshot(tmp_path, states, {0: SPIN, 1: SPIN, 2: LOAD, 3: SPIN}))
    rank0, rank2 = report["ranks"][0], report["ranks"][2]
    assert rank0["step"] == 12 and rank0["heartbeat_age"] == 0.5
    assert rank2["step"] is None and rank2["heartbeat_age"] == 0.2  # rounded to 0.1 s
    groups = rank0["collectives"]["groups"]
    assert groups == {
        "default_pg": {
            "size": 4,
            "enqueued": {"seq": 38, "op": "all_reduce", "site": SITE, "time": NOW - 30},
            "completed": {"seq": 37, "op": "all_reduce", "site": None, "time": NOW - 40.5},
        }
    }
    calls = rank0["collectives"]["trace"]
    assert [c["seq"] for c in calls] == list(range(31, 39))  # the newest 8, oldest first
    assert calls[-1] == {
        "group": "default_pg",
        "seq": 38,
        "op": "all_reduce",
        "site": SITE,
        "enqueued": NOW - 30,
        "completed": None,
        "async": True,
        "shapes": [[1024]],
        "dtypes": ["float32"],
        "error": None,
    }
    said = [c["error"] for c in report["ranks"][1]["collectives"]["trace"]]
    assert said == [None] * 6 + ["Connection closed by peer", None]
    assert rank0["state"] == "waiting" and rank0["collective"] == "all_reduce"
    assert report["findings"][0]["kind"] == "outlier" and report["findings"][0]["ranks"] == [2]
    json.dumps(report)  # plain JSON


def test_json_without_agents_has_nulls_and_the_old_keys(tmp_path):
    report = snapshot_to_json(snapshot(tmp_path, {}, {0: SPIN, 1: LOAD}))
    for rank in report["ranks"]:
        assert rank["step"] is None and rank["heartbeat_age"] is None
        assert rank["collectives"] is None
        assert {"rank", "state", "pid", "collective", "location", "threads"} <= set(rank)


def test_text_report_shows_step_and_heartbeat_only_when_known(tmp_path):
    stacks = {0: SPIN, 1: SPIN, 2: LOAD, 3: SPIN}
    plain_job = render_text(snapshot(tmp_path / "a", {}, stacks), verbose=True)
    header = plain_job[plain_job.index("Ranks by stack") :].splitlines()[1]
    assert header.split() == ["ranks", "state", "collective", "innermost", "user", "frame"]
    assert "heartbeat 0" not in plain_job and " step " not in plain_job
    states = {r: state(r, call(38), 37, time=NOW - 0.5 - r / 100) for r in (0, 1, 3)}
    states[2] = state(2, call(37, completed=NOW - 30), 37, time=NOW - 0.3, step=11)
    text = render_text(snapshot(tmp_path / "b", states, stacks), verbose=True)
    table = text[text.index("Ranks by stack") :].splitlines()
    assert table[1].split()[:5] == ["ranks", "state", "collective", "step", "heartbeat"]
    assert table[2].split()[:5] == ["0-1,3", "waiting", "all_reduce", "12", "0.5s"]
    assert table[3].split()[:5] == ["2", "running", "-", "11", "0.3s"]
    assert "rank 0  pid 4000  waiting  cpu 100%  step 12  heartbeat 0.5s ago" in text
    assert f"default_pg: made all_reduce #38 ({SITE}), complete up to #37" in text


def test_dump_reads_the_state_json_of_every_rank_of_a_run(tmp_path):
    """`mldebug dump --run DIR --json` on live processes that run with the directory (py-spy
    replaced by a fake that shows every rank idle in wait_for_peers): the states decide."""
    root = tmp_path / "run"
    root.mkdir(mode=0o700)
    procs = sleepers(3, root)
    try:
        pids = [p.pid for p in procs]
        manifest = {
            "status": "running",
            "world_size": 3,
            "ranks": [{"rank": r, "pid": pid} for r, pid in enumerate(pids)],
        }
        (root / "run.json").write_text(json.dumps(manifest))
        now = time.time()
        made = call(5, enqueued=now - 20)
        states = {r: state(r, made, 4, time=now - 0.5, pid=pids[r]) for r in (0, 1)}
        behind = call(4, enqueued=now - 25, completed=now - 24)
        states[2] = state(2, behind, 4, time=now - 0.4, pid=pids[2])
        write_run(tmp_path, states)
        pyspy, _ = fake_pyspy(tmp_path)
        done = subprocess.run(
            [sys.executable, "-m", "mldebug", "dump", "--run", str(root), "--json"],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "MLDEBUG_PYSPY": pyspy},
        )
    finally:
        stop(procs)
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    first = report["findings"][0]
    assert first["kind"] == "outlier" and first["severity"] == "error" and first["ranks"] == [2]
    assert first["summary"].startswith(f"rank 2 never called all_reduce #5 ({SITE}); it is at")
    assert [r["state"] for r in report["ranks"]] == ["waiting", "waiting", "stuck"]
    assert [r["step"] for r in report["ranks"]] == [12, 12, 12]
    assert all(0 <= r["heartbeat_age"] < 30 for r in report["ranks"])


def test_1024_ranks_with_full_traces_name_the_one_behind():
    # 1,024 ranks, each state with its 64 newest calls; rank 700 never made call #64.
    world = 1024
    targets, by_pid, agents = [], {}, {}
    for rank in range(world):
        target = RankTarget(pid=pid_of(rank), rank=rank, world_size=world)
        targets.append(target)
        last = 63 if rank == 700 else 64
        calls = tuple(
            CollectiveCall(
                "default_pg", seq, "all_reduce", SITE, NOW - 100 + seq, None, True, ((1024,),)
            )
            for seq in range(last - 63, last + 1)
        )
        done = CollectiveCall("default_pg", 63, "all_reduce", None, None, NOW - 40)
        agents[target.pid] = AgentState(
            rank,
            target.pid,
            NOW - 0.5,
            groups=(GroupProgress("default_pg", world, calls[-1], done),),
            trace=calls,
        )
        by_pid[target.pid] = samples(rank, LOAD if rank == 700 else SPIN)
    # (how fast is benchmarks/bench_commands.py's business: tests check behaviour)
    snap = build_snapshot(targets, by_pid, world, agents=agents, now=NOW)
    first = snap.findings[0]
    assert first.kind == KIND_OUTLIER and first.ranks == (700,)
    assert "ranks 0-699,701-1023 wait for it" in first.summary


def test_text_from_a_state_is_shown_as_written_without_escape_sequences(tmp_path):
    site = "/job/[bold]x[/bold]\x1b[2J.py:48"
    op = "all_reduce\x1b]0;owned\x07"
    states = {r: state(r, call(38, site=site, op=op), 37) for r in (0, 1, 3)}
    states[2] = state(2, call(37, completed=NOW - 30), 37, time=NOW - 0.3)
    snap = snapshot(tmp_path, states, {0: SPIN, 1: SPIN, 2: LOAD, 3: SPIN})
    text = render_text(snap, verbose=True, color=True)
    assert "/job/[bold]x[/bold]" in text
    assert "\x1b[2J" not in text and "\x1b]0;" not in text


def test_a_rank_not_read_this_time_whose_agent_moves_is_running_not_stuck(tmp_path):
    # GIVEN two ranks the live view did not read this poll (their stacks are carried over,
    # the same stack again), one whose agent says its step just moved, one whose did not
    moving = state(0, call(5, completed=NOW - 0.8, enqueued=NOW - 0.9), 5, step=40)
    moving["step_time"] = NOW - 0.6
    still = state(1, call(5, completed=NOW - 120, enqueued=NOW - 121), 5, step=40)
    still["step_time"] = NOW - 120
    root = write_run(tmp_path, {0: moving, 1: still})
    targets = [RankTarget(pid=pid_of(r), rank=r, world_size=2, run_dir=str(root)) for r in (0, 1)]
    carried = {
        pid_of(r): [replace(s, carried=True) for s in samples(r, LOAD, busy=False)] for r in (0, 1)
    }
    # WHEN the snapshot is built
    snap = build_snapshot(targets, carried, world_size=2, agents=read_states(targets), now=NOW)
    # THEN the moving rank runs, and only the one that does not move is stuck
    states = {v.rank: v.state for v in snap.ranks}
    assert states == {0: STATE_RUNNING, 1: STATE_STUCK}
    assert "its agent says it makes progress" in snap.ranks[0].detail


def test_ranks_read_in_their_waits_whose_agents_saw_them_step_meanwhile_are_working(tmp_path):
    # GIVEN a healthy job whose ranks wait for their device (a host wait) most of each short
    # step: three readings of each, 0.4 s apart, all fall in a wait (same stack, no CPU).
    # Ranks 0-1's agents saw a step 0.3 s ago (while they were read), rank 2's 1.5 s ago.
    def agent(rank: int, stepped_ago: float) -> dict:
        done = call(500, completed=NOW - stepped_ago - 0.01, enqueued=NOW - stepped_ago - 0.02)
        said = state(rank, done, 500, time=NOW - 0.1, step=900)
        said["step_time"] = NOW - stepped_ago
        return said

    states = {0: agent(0, 0.3), 1: agent(1, 0.3), 2: agent(2, 1.5)}
    idle = {rank: False for rank in states}
    # WHEN the snapshot is built THEN ranks 0-1 work, and rank 2 is as still as it reads
    # (graded by how long its agent has seen no progress: a short pause, info)
    snap = snapshot(tmp_path, states, {rank: LOAD for rank in states}, busy=idle)
    assert [v.state for v in snap.ranks] == [STATE_RUNNING, STATE_RUNNING, STATE_STUCK]
    assert "its agent saw it move meanwhile" in snap.ranks[0].detail
    (stuck,) = [f for f in snap.findings if f.ranks == (2,)]
    assert stuck.severity == SEVERITY_INFO
    # ...and when every rank stepped meanwhile, the job is working, and says why
    states[2] = agent(2, 0.3)
    snap = snapshot(tmp_path, states, {rank: LOAD for rank in states}, busy=idle)
    assert [(f.kind, f.severity) for f in snap.findings] == [(KIND_PROGRESSING, SEVERITY_INFO)]
    assert "their agents see them move" in snap.findings[0].summary


def test_a_rank_not_read_yet_or_read_once_whose_agent_moves_is_running(tmp_path):
    # GIVEN four ranks of a live view that reads moving ranks in turns: rank 0 not read yet
    # and rank 1 read once (one stack: unknown), both with agents whose step just moved;
    # ranks 2 and 3 the same but with agents whose step stopped two minutes ago
    def agent(rank: int, moved_ago: float) -> dict:
        done = call(5, completed=NOW - moved_ago - 0.2, enqueued=NOW - moved_ago - 0.3)
        said = state(rank, done, 5, step=40)
        said["step_time"] = NOW - moved_ago
        return said

    root = write_run(
        tmp_path, {0: agent(0, 0.6), 1: agent(1, 0.6), 2: agent(2, 120), 3: agent(3, 120)}
    )
    targets = [RankTarget(pid=pid_of(r), rank=r, world_size=4, run_dir=str(root)) for r in range(4)]
    once = {pid_of(r): samples(r, LOAD, busy=False)[-1:] for r in (1, 3)}
    # WHEN the snapshot is built
    snap = build_snapshot(targets, once, world_size=4, agents=read_states(targets), now=NOW)
    # THEN the ranks whose agents move are running; the others are as their stacks say
    states = {v.rank: v.state for v in snap.ranks}
    assert states == {0: STATE_RUNNING, 1: STATE_RUNNING, 2: STATE_UNKNOWN, 3: STATE_UNKNOWN}
    assert "its stack is not read yet" in snap.ranks[0].detail
    assert "one reading of its stack so far" in snap.ranks[1].detail


def test_the_rank_behind_that_lost_a_thread_its_peer_runs_is_told_so(tmp_path):
    # GIVEN rank 0 made all_reduce #13 and waits; rank 1 never made it, and rank 1 lacks the
    # prefetch thread rank 0 runs (the demo's silent hang, as the agents count it)
    states = {0: state(0, call(13), 12), 1: state(1, call(12, completed=NOW - 31), 12)}
    root = write_run(tmp_path, states)
    targets = [RankTarget(pid=pid_of(r), rank=r, world_size=2, run_dir=str(root)) for r in (0, 1)]
    prefetch = ThreadStack(
        3,
        "Thread-1 (prefetch)",
        (
            Frame("Thread.run", "/usr/lib/python3.11/threading.py", 982),
            Frame("prefetch", TRAIN, 20),
        ),
    )
    by_pid = {pid_of(0): samples(0, SPIN, busy=False), pid_of(1): samples(1, LOAD, busy=False)}
    by_pid[pid_of(0)] = [replace(s, threads=(*s.threads, prefetch)) for s in by_pid[pid_of(0)]]
    # WHEN the snapshot is built, THEN the verdict says rank 1 lost that thread
    snap = build_snapshot(targets, by_pid, world_size=2, agents=read_states(targets), now=NOW)
    verdict = snap.findings[0]
    assert verdict.ranks == (1,) and "never called all_reduce #13" in verdict.summary
    assert (
        "; rank 1 has no thread running prefetch (train.py), which rank 0 has: it may have died"
        " (the waiting ranks have waited 30 s)"
    ) in finding_text(verdict)


def _checkpoint_pause(tmp_path, last_progress_ago: float, cpu_waits=None):
    """Rank 0 sleeps in save_checkpoint; rank 1's stack waits in barrier, but its agent's
    state (written 0.5 s ago, a heartbeat's age) saw it wait in nothing: its last
    collective, broadcast #40, completed `last_progress_ago` seconds ago. `cpu_waits`: rank
    -> its main thread's wait for a CPU in its step under way, as the dump read it."""
    c10d = "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"
    barrier = (MODULE, Frame("main", TRAIN, 131), Frame("barrier", c10d, 4000))
    saving = (MODULE, Frame("save_checkpoint", TRAIN, 130))
    done = NOW - last_progress_ago
    made = {"seq": 40, "op": "broadcast", "site": SITE, "shapes": [[2]], "dtypes": ["int64"]}
    groups = {
        "default_pg": {
            "size": 2,
            "enqueued": {**made, "async": False, "time": done - 0.01},
            "completed": {"seq": 40, "op": "broadcast", "time": done},
        }
    }
    states = {
        rank: heartbeat_state(
            rank, pid_of(rank), NOW - 0.5, groups=groups, step=50, step_time=done - 0.02
        )
        for rank in (0, 1)
    }
    return snapshot(
        tmp_path, states, {0: saving, 1: barrier}, busy={0: False, 1: False}, cpu_waits=cpu_waits
    )


def test_a_wait_begun_since_the_agents_last_state_is_graded_by_its_last_progress(tmp_path):
    # GIVEN a checkpoint pause: rank 1 entered the barrier after its agent last wrote
    snap = _checkpoint_pause(tmp_path, last_progress_ago=1.5)
    (outlier,) = [f for f in snap.findings if f.kind == KIND_OUTLIER]
    # THEN it has waited at most since its broadcast completed, 1.5 s: a pause, info
    assert outlier.ranks == (0,)
    assert outlier.severity == SEVERITY_INFO
    assert "for 1.5 s so far: a pause that short is not a hang" in finding_text(outlier)


def test_a_pause_a_busy_node_stretched_past_the_pause_bound_is_still_a_pause(tmp_path):
    # GIVEN rank 1 has waited 6 s for rank 0, whose checkpoint pause is a second's sleep:
    # on a busy node rank 0's main thread then waited 3 s for a CPU in its step
    (stretched,) = [
        f for f in _checkpoint_pause(tmp_path, 6, {0: 3.0}).findings if f.kind == KIND_OUTLIER
    ]
    # THEN the wait less what the node held back is a pause: info, and said so
    assert stretched.severity == SEVERITY_INFO and stretched.waited == pytest.approx(6.0)
    assert ("cpu_wait_s", "3.0") in stretched.facts
    assert finding_text(stretched).endswith(
        "(for 6.0 s so far, 3.0 s of it rank 0 waiting for a CPU (a busy node):"
        " a pause that short is not a hang)"
    )
    # AND a rank the node held back less, or that its agent cannot say, is waited for as before
    for held in ({0: 0.5}, {1: 3.0}, None):
        (outlier,) = [
            f for f in _checkpoint_pause(tmp_path, 6, held).findings if f.kind == KIND_OUTLIER
        ]
        assert outlier.severity == SEVERITY_WARNING, held
    # AND a wait past the hang threshold is a hang however busy the node
    (hang,) = [
        f for f in _checkpoint_pause(tmp_path, 30, {0: 25.0}).findings if f.kind == KIND_OUTLIER
    ]
    assert hang.severity == SEVERITY_ERROR


def test_a_wait_in_a_collective_its_agent_never_saw_is_an_error_once_progress_is_old(tmp_path):
    # GIVEN the same stacks, but rank 1's last progress was 60 s ago: a hang, whatever call
    snap = _checkpoint_pause(tmp_path, last_progress_ago=60)
    (outlier,) = [f for f in snap.findings if f.kind == KIND_OUTLIER]
    assert outlier.severity == SEVERITY_ERROR


C10D = "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"
BARRIER = (MODULE, Frame("main", TRAIN, 70), Frame("barrier", C10D, 4000))


def test_a_rank_last_out_of_the_final_barrier_is_no_error_until_its_wait_is_a_hang(tmp_path):
    # GIVEN rank 0 returned normally (exit code 0) and rank 1, read a moment later, is still
    # inside the job's final barrier, which its agent saw it enter `entered` seconds ago
    def job(entered):
        states = {1: state(1, call(41, op="barrier", enqueued=NOW - entered), 40)}
        root = write_run(tmp_path, states)
        target = RankTarget(pid=pid_of(1), rank=1, world_size=2, run_dir=str(root))
        return build_snapshot(
            [target], {pid_of(1): samples(1, BARRIER, False)}, world_size=2,
            exit_codes={0: 0}, agents=read_states([target]), now=NOW,
        )  # fmt: skip

    # THEN a rank leaving a barrier a moment after the other is the job ending: info
    (ended,) = [f for f in job(0.8).findings if f.ranks == (0,)]
    assert ended.kind == "missing" and ended.severity == SEVERITY_INFO
    assert "a pause that short is not a hang" in finding_text(ended)
    # ...and a rank left waiting for longer than a hang is one: rank 0 left early
    (left,) = [f for f in job(30).findings if f.ranks == (0,)]
    assert left.severity == SEVERITY_ERROR
    assert "cannot complete a collective without it" in left.summary


def test_two_ranks_caught_a_moment_apart_in_two_calls_are_no_mismatch(tmp_path):
    # GIVEN a healthy job on a loaded node: rank 1 still ends all_reduce #38 (the shards, line
    # 58) while rank 0, done with it, waits in #39 (the gradients, line 52), made 0.3 s ago;
    # both stacks stay put over the 3 readings (a slow all_reduce on a loaded node)
    grads, shards = f"{TRAIN}:52", f"{TRAIN}:58"
    in_grads = (MODULE, Frame("main", TRAIN, 52), Frame("all_reduce", C10D, 2800))
    in_shards = (MODULE, Frame("main", TRAIN, 58), Frame("all_reduce", C10D, 2800))
    states = {
        0: state(0, call(39, enqueued=NOW - 0.8, site=grads), 38),
        1: state(1, call(38, enqueued=NOW - 1.0, site=shards), 37),
    }
    snap = snapshot(tmp_path, states, {0: in_grads, 1: in_shards}, busy={0: False, 1: False})
    # THEN the agents, which count the same calls, are believed: no mismatch, nothing wrong
    assert [f for f in snap.findings if f.kind == KIND_MISMATCH] == []
    assert all(f.severity == SEVERITY_INFO for f in snap.findings), snap.findings
    # ...while without agents the same stacks are two calls that never match
    bare = snapshot(tmp_path / "bare", {}, {0: in_grads, 1: in_shards}, busy={0: False, 1: False})
    assert [f.kind for f in bare.findings if f.severity != SEVERITY_INFO] == [KIND_MISMATCH]


@pytest.mark.parametrize(("alive_s", "severity"), [(25.0, SEVERITY_INFO), (90.0, SEVERITY_WARNING)])
def test_ranks_waiting_in_init_for_a_rank_still_importing_are_a_job_starting_up(
    tmp_path, alive_s, severity
):
    # GIVEN a job whose ranks started `alive_s` ago: rank 0 waits in init_process_group,
    # rank 1 is still busy importing torch (a loaded node); neither made any call yet
    init = (MODULE, Frame("main", TRAIN, 12), Frame("init_process_group", C10D, 1700))
    importing = (Frame("<module>", TRAIN, 3), Frame("_find_and_load", "<frozen importlib>", 1))
    states = {r: heartbeat_state(r, pid_of(r), NOW - 0.5, started=NOW - alive_s) for r in (0, 1)}
    snap = snapshot(tmp_path, states, {0: init, 1: importing}, busy={0: False, 1: True})
    (outlier,) = [f for f in snap.findings if f.kind == KIND_OUTLIER]
    # THEN rank 1 is named, and graded as start-up: info within a minute, never an error
    assert outlier.ranks == (1,)
    assert outlier.severity == severity
    if severity == SEVERITY_INFO:
        assert "so far: ranks still starting up are not a hang" in finding_text(outlier)
    else:
        assert "have waited 90 s for it to start" in finding_text(outlier)


@pytest.mark.parametrize(("alive_s", "severity"), [(25.0, SEVERITY_INFO), (90.0, SEVERITY_WARNING)])
def test_ranks_waiting_in_init_for_a_rank_busy_inside_it_are_a_job_starting_up(
    tmp_path, alive_s, severity
):
    # GIVEN rank 0 still in init_process_group and rank 1 working inside it too (connecting,
    # building its transport on a loaded node): both reached it, neither made a call yet
    init = (MODULE, Frame("main", TRAIN, 12), Frame("init_process_group", C10D, 1700))
    states = {r: heartbeat_state(r, pid_of(r), NOW - 0.5, started=NOW - alive_s) for r in (0, 1)}
    snap = snapshot(tmp_path, states, {0: init, 1: init}, busy={0: False, 1: True})
    # THEN it is no "the rendezvous never completes" error: start-up, graded as such
    (finding,) = snap.findings
    assert finding.kind == KIND_RENDEZVOUS and finding.ranks == (1,)
    assert finding.severity == severity
    assert "rank 1 is still busy inside init_process_group" in finding.summary


@pytest.mark.parametrize(
    ("waited_s", "severity"), [(44.0, SEVERITY_INFO), (300.0, SEVERITY_WARNING)]
)
def test_a_rank_busy_importing_while_the_other_waits_in_all_reduce_is_no_hang(
    tmp_path, waited_s, severity
):
    # GIVEN rank 0 waits in its first all_reduce (its agent saw it enter `waited_s` ago) and
    # rank 1, on a loaded node, is still building its optimizer, whose constructor imports
    # torch._dynamo: importlib compiling the package's bytecode anew
    site = "/venv/lib/python3.11/site-packages/"
    boot, external = "<frozen importlib._bootstrap>", "<frozen importlib._bootstrap_external>"
    importing = (
        MODULE,
        Frame("main", TRAIN, 56),
        Frame("__init__", site + "torch/optim/sgd.py", 30),
        Frame("_disable_dynamo.<locals>.inner", site + "torch/_compile.py", 47),
        Frame("_find_and_load", boot, 1176),
        Frame("_call_with_frames_removed", boot, 241),
        Frame("<module>", site + "torch/_dynamo/__init__.py", 13),
        Frame("_find_and_load", boot, 1176),
        Frame("<module>", site + "torch/_dynamo/variables/builder.py", 298),
        Frame("_compile_bytecode", external, 729),
    )
    all_reduce = (MODULE, Frame("main", TRAIN, 62), Frame("all_reduce", C10D, 2500))
    states = {
        0: state(0, call(1, op="all_reduce", enqueued=NOW - waited_s), 0),
        1: heartbeat_state(1, pid_of(1), NOW - 0.5, started=NOW - waited_s - 30),
    }
    snap = snapshot(tmp_path, states, {0: all_reduce, 1: importing}, busy={0: False, 1: True})
    (outlier,) = [f for f in snap.findings if f.kind == KIND_OUTLIER]
    # THEN rank 1 is named importing torch._dynamo, and the wait is graded as start-up's:
    # never an error (the watchdog stops no job for it)
    assert outlier.ranks == (1,) and outlier.severity == severity
    assert "; it is busy importing torch._dynamo at /home/me/proj/train.py:56 in main" in (
        outlier.summary
    )
    assert ("importing", "torch._dynamo") in outlier.facts
    if severity == SEVERITY_INFO:
        assert "for 44 s so far: a rank busy importing is not a hang" in finding_text(outlier)
    else:
        assert "have waited 300 s for it to load" in finding_text(outlier)
    assert all(f.severity != SEVERITY_ERROR for f in snap.findings), snap.findings
