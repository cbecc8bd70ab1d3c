"""Each finding kind, from samples built by hand with the model (through build_snapshot)."""

from pathlib import Path

from testkit.stacks import C10D, MAIN, MODULE, TRAIN, at, in_op, samples, snapshot, still

from mldebug.analysis.snapshot import build_snapshot
from mldebug.analysis.states import rank_state
from mldebug.collect.pyspy import parse_pyspy_json
from mldebug.model import (
    FAIL_EXITED,
    FAIL_NOT_PYTHON,
    FAIL_PERMISSION,
    KIND_CRASH,
    KIND_HANG,
    KIND_MISMATCH,
    KIND_MISSING,
    KIND_OUTLIER,
    KIND_PROGRESSING,
    KIND_RENDEZVOUS,
    KIND_STUCK,
    KIND_THREADS,
    KIND_UNREADABLE,
    SEVERITY_ERROR,
    SEVERITY_INFO,
    SEVERITY_WARNING,
    STATE_RUNNING,
    STATE_STUCK,
    STATE_UNKNOWN,
    Frame,
    RankCrash,
    RankTarget,
    StackSample,
    ThreadStack,
)


def kinds(snap):
    return [f.kind for f in snap.findings]


def test_outlier_names_the_rank_and_its_line():
    ranks = {r: still(in_op("all_reduce", "sync", 64)) for r in range(8)}
    ranks[5] = still(at("load_shard", 38))
    snap = snapshot(ranks, world=8)
    (finding,) = snap.findings
    assert finding.kind == KIND_OUTLIER and finding.severity == SEVERITY_ERROR
    assert finding.ranks == (5,)
    assert finding.location == f"{TRAIN}:38"
    assert finding.recipe == "rank-outside-collective"
    assert "all_reduce" in finding.summary and "0-4,6-7" in finding.summary
    assert [p.ranks for p in finding.parts] == [(5,), (0, 1, 2, 3, 4, 6, 7)]


def test_outliers_in_two_places_are_two_findings():
    ranks = {r: still(in_op("all_reduce", "sync", 64)) for r in range(4)}
    ranks[1] = still(at("wait_for_lock", 43))
    ranks[2] = still(at("__getitem__", 53))
    snap = snapshot(ranks, world=4)
    assert [(f.kind, f.ranks, f.location) for f in snap.findings] == [
        (KIND_OUTLIER, (1,), f"{TRAIN}:43"),
        (KIND_OUTLIER, (2,), f"{TRAIN}:53"),
    ]


def test_mismatched_ops_name_each_side():
    ranks = {r: still(in_op("all_gather", "gather_metrics", 70)) for r in (0, 1)}
    ranks.update({r: still(in_op("all_reduce", "sync", 64)) for r in (2, 3, 4)})
    (finding,) = snapshot(ranks, world=5).findings
    assert finding.kind == KIND_MISMATCH and finding.ranks == (0, 1, 2, 3, 4)
    assert finding.recipe == "mismatched-collectives"
    assert {(p.label, p.ranks, p.location) for p in finding.parts} == {
        ("all_gather", (0, 1), f"{TRAIN}:70"),
        ("all_reduce", (2, 3, 4), f"{TRAIN}:64"),
    }
    assert finding.location == f"{TRAIN}:70"  # the smaller side
    assert "different collectives" in finding.summary


def test_one_op_from_two_call_sites_is_a_mismatch():
    ranks = {0: still(in_op("all_reduce", "sync", 64)), 1: still(in_op("all_reduce", "eval", 99))}
    (finding,) = snapshot(ranks).findings
    assert finding.kind == KIND_MISMATCH
    assert "all_reduce from different lines" in finding.summary


def test_missing_ranks_with_exit_codes():
    ranks = {r: still(in_op("all_reduce", "sync", 64)) for r in (0, 1, 3)}
    snap = snapshot(ranks, world=5, exit_codes={2: -9})
    first = snap.findings[0]
    assert first.kind == KIND_MISSING and first.ranks == (2, 4)
    assert "rank 2 exited with code -9" in first.summary
    assert first.recipe == "missing-ranks"
    hang = snap.findings[1]
    assert hang.kind == KIND_HANG and hang.ranks == (0, 1, 3)
    states = {v.rank: v.state for v in snap.ranks}
    assert states[2] == "exited" and states[4] == "missing"


def test_rank_that_exits_during_the_dump():
    ranks = {
        0: still(in_op("barrier", "sync", 10)),
        1: (((at("step", 5)), (), ()), {"failure": FAIL_EXITED}),
    }
    snap = snapshot(ranks, world=2)
    assert snap.findings[0].kind == KIND_MISSING and snap.findings[0].ranks == (1,)


def test_a_rank_that_finished_first_while_the_others_still_work_is_info():
    # GIVEN rank 0 returned (exit 0) and rank 1 still computes its last step, or tears down
    for last in (at("save_final", 77), in_op("destroy_process_group", "main", 190)):
        busy = ((last, at("save_final", 78), last), {"main_cpu": (0.0, 0.3, 0.6)})
        snap = snapshot({1: busy}, world=2, exit_codes={0: 0})
        # THEN that is the job ending rank by rank: said, and no warning
        (ended,) = [f for f in snap.findings if f.kind == KIND_MISSING]
        assert ended.severity == SEVERITY_INFO and ended.ranks == (0,)
        assert "finished (exit code 0) while rank 1 still runs" in ended.summary
        assert all(f.severity == SEVERITY_INFO for f in snap.findings)


def test_a_rank_that_finished_first_while_the_others_wait_in_a_collective_is_an_error():
    # GIVEN rank 0 returned (exit 0) and rank 1 waits in all_reduce: rank 0 left early
    snap = snapshot({1: still(in_op("all_reduce", "sync", 64))}, world=2, exit_codes={0: 0})
    missing = snap.findings[0]
    assert missing.kind == KIND_MISSING and missing.severity == SEVERITY_ERROR
    assert "cannot complete a collective without it" in missing.summary


def test_a_rank_whose_python_shut_down_but_is_not_reaped_yet_is_a_rank_that_ended():
    # GIVEN rank 0's agent wrote exit.json and its process is gone from view (its native
    # teardown under load: no environment to read, no exit code recorded by its launcher),
    # while rank 1, past its final barrier, tears down too (no Python frame left)
    teardown = ((), {"main_cpu": (0.0, 0.3, 0.6)})
    snap = snapshot({1: teardown}, world=2, shut_down={0, 1})
    # THEN the job ends rank by rank: no error, no "not running"
    (ended,) = [f for f in snap.findings if f.kind == KIND_MISSING]
    assert ended.severity == SEVERITY_INFO and ended.ranks == (0,)
    assert "finished (Python shut down) while rank 1 still runs" in ended.summary
    assert all(f.severity == SEVERITY_INFO for f in snap.findings)
    view = next(v for v in snap.ranks if v.rank == 0)
    assert view.state == "exited" and view.shut_down and view.exit_code is None
    # AND without its exit.json the same absence is a missing rank, as before
    missing = snapshot({1: teardown}, world=2).findings[0]
    assert missing.kind == KIND_MISSING and missing.severity == SEVERITY_ERROR


def test_a_rank_whose_python_shut_down_while_another_waits_in_a_collective_is_an_error():
    snap = snapshot({1: still(in_op("all_reduce", "sync", 64))}, world=2, shut_down={0})
    missing = snap.findings[0]
    assert missing.kind == KIND_MISSING and missing.severity == SEVERITY_ERROR
    assert "rank 0's Python shut down normally" in missing.summary
    assert ("ended", "Python shut down normally") in missing.facts  # graded by the wait


def test_a_rank_read_in_its_teardown_after_its_python_shut_down_is_a_rank_that_ended():
    # GIVEN rank 1's agent wrote exit.json and py-spy then read it in torch's native teardown,
    # where its interpreter is gone and its process not yet: "no Python interpreter found"
    teardown = (((), (), ()), {"failure": FAIL_NOT_PYTHON, "main_cpu": (0, 0.3, 0.6)})
    snap = snapshot({1: teardown}, world=2, exit_codes={0: 0}, shut_down={1})
    # THEN the rank has ended as its Python shut down, no rank the dump could not read
    assert KIND_UNREADABLE not in kinds(snap)
    view = next(v for v in snap.ranks if v.rank == 1)
    assert view.state == "exited" and view.shut_down and view.exit_code is None
    assert all(f.severity == SEVERITY_INFO for f in snap.findings)
    # AND without its exit.json it is a rank that could not be read, as before
    assert KIND_UNREADABLE in kinds(snapshot({1: teardown}, world=2, exit_codes={0: 0}))


def test_a_rank_read_in_its_teardown_and_reaped_since_is_a_rank_that_exited_with_its_code():
    # GIVEN py-spy read rank 1 in its native teardown and its launcher has reaped it since:
    # run.json records its code (and no longer any shut-down)
    teardown = (((), (), ()), {"failure": FAIL_NOT_PYTHON, "main_cpu": (0, 0.3, 0.6)})
    snap = snapshot({1: teardown}, world=2, exit_codes={0: 0, 1: 0})
    # THEN it exited with that code; the job ended well
    assert KIND_UNREADABLE not in kinds(snap)
    view = next(v for v in snap.ranks if v.rank == 1)
    assert view.state == "exited" and view.exit_code == 0 and not view.shut_down
    assert all(f.severity == SEVERITY_INFO for f in snap.findings)


def test_every_rank_shut_down_or_exited_0_is_a_job_that_ended():
    gone = (((at("step", 5)), (), ()), {"failure": FAIL_EXITED})
    snap = snapshot({0: gone}, world=2, exit_codes={1: 0}, shut_down={0})
    (ended,) = snap.findings
    assert ended.kind == "ended" and ended.severity == SEVERITY_INFO


def test_rendezvous_when_everyone_waits_in_init():
    init = (MODULE, MAIN, Frame("init_process_group", C10D, 1700))
    (finding,) = snapshot({r: still(init) for r in range(4)}, world=4).findings
    assert finding.kind == KIND_RENDEZVOUS and finding.ranks == (0, 1, 2, 3)
    assert finding.recipe == "rendezvous-hang"
    assert finding.location == f"{TRAIN}:180"


def test_all_in_one_collective_is_a_hang():
    (finding,) = snapshot({r: still(in_op("all_reduce", "sync", 64)) for r in range(4)}).findings
    assert finding.kind == KIND_HANG and finding.recipe == "collective-hang"


def test_unreadable_ranks_point_to_the_ptrace_recipe():
    ranks = {
        0: still(in_op("all_reduce", "sync", 64)),
        1: (((), (), ()), {"failure": FAIL_PERMISSION}),
    }
    snap = snapshot(ranks)
    unreadable = [f for f in snap.findings if f.kind == KIND_UNREADABLE]
    assert unreadable[0].ranks == (1,) and unreadable[0].recipe == "ptrace-permission"
    assert unreadable[0].severity == SEVERITY_WARNING


def test_ranks_waiting_beside_a_rank_not_read_are_not_called_a_hang():
    # GIVEN rank 0 still in init_process_group and rank 1 not read (py-spy timed out on a
    # loaded node, as a rank still importing torch can make it)
    for op, kind in (("init_process_group", KIND_RENDEZVOUS), ("all_reduce", KIND_HANG)):
        ranks = {0: still(in_op(op, "setup", 20)), 1: (((), (), ()), {"failure": FAIL_PERMISSION})}
        snap = snapshot(ranks, world=2)
        # THEN no error says the rendezvous (or the collective) never completes: rank 1 may
        # be what rank 0 waits for
        (waits,) = [f for f in snap.findings if f.kind == kind]
        assert waits.ranks == (0,) and waits.severity == SEVERITY_WARNING
        assert waits.summary.startswith(f"rank 0 waits in {op} at ")
        assert waits.summary.endswith(
            "; rank 1 could not be read, so whether it is elsewhere is not known"
        )
        assert not [f for f in snap.findings if f.severity == SEVERITY_ERROR]


def test_a_healthy_job_is_progressing_not_hung():
    # Sampled mid-collective, but stacks move between samples or the main thread computes.
    ranks = {
        0: (
            (in_op("all_reduce", "sync", 64), at("forward", 30), in_op("all_reduce", "sync", 64)),
            {},
        ),
        1: (tuple([in_op("all_reduce", "sync", 64)] * 3), {"main_cpu": (0.0, 0.2, 0.4)}),
        2: ((at("forward", 30), at("forward", 31), at("forward", 30)), {}),
    }
    snap = snapshot(ranks, world=3)
    assert kinds(snap) == [KIND_PROGRESSING]
    assert snap.findings[0].severity == SEVERITY_INFO
    assert {v.state for v in snap.ranks} == {STATE_RUNNING}


def test_a_busy_rank_is_still_an_outlier_when_others_are_stuck():
    ranks = {r: still(in_op("all_reduce", "sync", 64)) for r in range(3)}
    ranks[3] = still(at("heavy_kernel", 12), main_cpu=(0.0, 0.4, 0.8))  # C code holding the GIL
    (finding,) = snapshot(ranks, world=4).findings
    assert finding.kind == KIND_OUTLIER and finding.ranks == (3,)
    assert "it is busy in heavy_kernel" in finding.summary


def test_one_sample_only_gives_warnings():
    ranks = {r: ((in_op("all_reduce", "sync", 64),), {}) for r in range(3)}
    ranks[3] = ((at("load", 5),), {})
    snap = snapshot(ranks, world=4)
    assert {v.state for v in snap.ranks} == {STATE_UNKNOWN}
    assert snap.findings[0].kind == KIND_OUTLIER
    assert snap.findings[0].severity == SEVERITY_WARNING


def test_stuck_outside_any_collective_is_a_warning():
    (finding,) = snapshot({r: still(at("wait_for_peers", 19)) for r in range(3)}).findings
    assert finding.kind == KIND_STUCK and finding.severity == SEVERITY_WARNING


def test_rank_state_rules():
    target = RankTarget(pid=1)
    frames = (ThreadStack(1, "MainThread", at("f", 1)),)

    def sample(t, cpu):
        return StackSample(target, t, frames, cpu_seconds=cpu, main_cpu_seconds=cpu)

    assert rank_state([sample(0, 0.0), sample(1, 0.0)])[0] == STATE_STUCK
    assert rank_state([sample(0, 0.0), sample(1, 0.5)])[0] == STATE_RUNNING
    assert rank_state([sample(0, 0.0)])[0] == STATE_UNKNOWN
    assert rank_state([])[0] == STATE_UNKNOWN
    # one 10 ms tick between two readings 50 ms apart is 20%, but it is noise, not work
    assert rank_state([sample(0, 0.0), sample(0.05, 0.01)])[0] == STATE_STUCK
    assert rank_state([sample(0, 0.0), sample(0.05, 0.04)])[0] == STATE_RUNNING


def test_a_still_rank_whose_main_thread_waits_for_a_cpu_is_running_on_a_starved_node():
    target = RankTarget(pid=1)
    frames = (ThreadStack(1, "MainThread", at("f", 1)),)

    def sample(t, cpu, delay):
        return StackSample(
            target, t, frames, cpu_seconds=cpu, main_cpu_seconds=cpu, main_run_delay=delay
        )

    # 1% of a core, ready to run the other 60% of the second: starved, working
    state, _, detail = rank_state([sample(0, 0.0, 3.0), sample(1, 0.01, 3.6)])
    assert state == STATE_RUNNING and "waits for a CPU 60% of the time" in detail
    # a thread that sleeps or waits for a peer is never ready to run: stuck
    assert rank_state([sample(0, 0.0, 3.0), sample(1, 0.0, 3.0)])[0] == STATE_STUCK
    # a thread that polls in a sleep loop on a crowded node waits for its CPU at each
    # wake-up, a third of its time here: idle all the same
    assert rank_state([sample(0, 0.0, 3.0), sample(1, 0.002, 3.3)])[0] == STATE_STUCK
    # a few ms ready to run is the scheduler's noise, not starvation
    assert rank_state([sample(0, 0.0, 3.0), sample(1, 0.0, 3.015)])[0] == STATE_STUCK
    # not known (another OS, no schedstat): the CPU alone decides, as before
    assert rank_state([sample(0, 0.0, None), sample(1, 0.0, None)])[0] == STATE_STUCK


def test_a_still_rank_queued_for_a_cpu_at_every_reading_is_running():
    # A rank computing on a crowded node, queued for a CPU all through the readings: no CPU
    # grew, and its run delay is counted only once it runs again. Its state (R) says it.
    target = RankTarget(pid=1)
    frames = (ThreadStack(1, "MainThread", at("evaluate", 88)),)

    def sample(t, runnable):
        return StackSample(
            target, t, frames, cpu_seconds=5.0, main_cpu_seconds=5.0, main_run_delay=3.0,
            main_runnable=runnable,
        )  # fmt: skip

    state, _, detail = rank_state([sample(0, True), sample(0.4, True), sample(0.8, True)])
    assert (
        state == STATE_RUNNING and detail == "same stack, but its main thread is queued for a CPU"
    )
    # asleep (or waiting for a peer) at one reading: idle, as before; unknown: as before
    assert rank_state([sample(0, True), sample(0.4, False), sample(0.8, True)])[0] == STATE_STUCK
    assert rank_state([sample(0, None), sample(0.4, True), sample(0.8, True)])[0] == STATE_STUCK


def test_ranks_working_inside_init_are_not_outliers_of_it():
    # GIVEN ranks arriving at init_process_group one after another: two already wait, one
    # is still working inside it
    init = in_op("init_process_group", "setup", 20)
    busy_a = in_op("init_process_group", "setup", 20)[:-1] + (
        Frame("_store_based_barrier", C10D, 90),
    )
    snap = snapshot(
        {
            0: ((init, init, init), {}),
            1: ((init, busy_a, init), {"main_cpu": (0.0, 0.2, 0.4)}),
            2: ((init, init, init), {}),
        },
        world=3,
    )
    # THEN nobody is called an outlier of the rendezvous it is in, and the waiting ranks'
    # stillness is no "the rendezvous never completes" error: rank 1 is on its way through
    assert not [f for f in snap.findings if f.kind == KIND_OUTLIER]
    (finding,) = snap.findings
    assert finding.kind == KIND_RENDEZVOUS and finding.ranks == (1,)
    assert finding.severity == SEVERITY_WARNING
    assert ("starting", "init_process_group") in finding.facts
    assert finding.summary.startswith("rank 1 is still busy inside init_process_group at setup"), (
        finding.summary
    )
    assert "while ranks 0,2 wait in init_process_group" in finding.summary
    assert [p.ranks for p in finding.parts] == [(1,), (0, 2)]


def test_a_rank_still_starting_up_is_only_a_warning():
    # GIVEN two ranks waiting in init_process_group and one still busy before it (imports)
    init = in_op("init_process_group", "setup", 20)
    snap = snapshot(
        {
            0: ((init, init, init), {}),
            1: (
                (at("load_config", 5), at("load_config", 6), at("load_config", 7)),
                {"main_cpu": (0.0, 0.3, 0.6)},
            ),
            2: ((init, init, init), {}),
        },
        world=3,
    )
    outlier = [f for f in snap.findings if f.kind == KIND_OUTLIER]
    assert [f.ranks for f in outlier] == [(1,)]
    assert outlier[0].severity == SEVERITY_WARNING
    assert "ranks 0,2 wait in init_process_group" in outlier[0].summary


def test_a_rank_busy_importing_is_only_a_warning_and_a_rank_stuck_in_an_import_an_error():
    # GIVEN rank 0 stuck in all_reduce and rank 1 inside an import its code asked for: busy
    # (its CPU moves: a package loading), or stuck there (no CPU: a file system that hangs)
    boot = "<frozen importlib._bootstrap>"
    loading = at("build", 40) + (
        Frame("_find_and_load", boot, 1176),
        Frame("<module>", "/venv/lib/python3.11/site-packages/torch/_dynamo/__init__.py", 13),
    )
    waiting = in_op("all_reduce", "step", 20)
    for cpu, severity in (((0.0, 0.3, 0.6), SEVERITY_WARNING), ((0.0, 0.0, 0.0), SEVERITY_ERROR)):
        snap = snapshot({0: ((waiting,) * 3, {}), 1: ((loading,) * 3, {"main_cpu": cpu})}, world=2)
        (outlier,) = [f for f in snap.findings if f.kind == KIND_OUTLIER]
        assert outlier.ranks == (1,) and outlier.severity == severity
        if severity == SEVERITY_WARNING:
            assert "it is busy importing torch._dynamo in build" in outlier.summary
            assert ("importing", "torch._dynamo") in outlier.facts
        else:
            assert "it is stuck in build" in outlier.summary and not outlier.facts


def test_the_first_crash_is_the_root_cause():
    # GIVEN rank 2 raised first and rank 0 failed after it, and rank 1 still waits
    crashes = (
        RankCrash(2, 10.0, "uncaught exception", "ValueError", "bad shard", "t.py:9"),
        RankCrash(0, 11.0, "uncaught exception", "RuntimeError", "peer closed", "t.py:3"),
    )
    waiting = in_op("all_reduce", "step", 40)
    targets, by_pid = [], {}
    for rank in (1,):
        target, rank_samples = samples(rank, waiting, waiting, waiting, world=3)
        targets.append(target)
        by_pid[target.pid] = rank_samples
    snap = build_snapshot(targets, by_pid, world_size=3, exit_codes={0: 1, 2: 1}, crashes=crashes)
    # THEN the verdict leads with rank 2's exception at its line
    first = snap.findings[0]
    assert (first.kind, first.ranks, first.location, first.recipe) == (
        KIND_CRASH,
        (2,),
        "t.py:9",
        "rank-crash",
    )
    assert first.summary == (
        "rank 2 failed first: ValueError: bad shard (t.py:9); rank 0 failed after it"
    )
    # AND the ranks still alive are told to be waiting for the missing ones
    assert KIND_MISSING in [f.kind for f in snap.findings]


def test_a_crash_of_a_rank_still_alive_is_not_reported():
    waiting = in_op("all_reduce", "step", 40)
    target, rank_samples = samples(0, waiting, waiting, world=1)
    snap = build_snapshot(
        [target],
        {target.pid: rank_samples},
        world_size=1,
        crashes=(RankCrash(0, 1.0, exc_type="ValueError", message="x"),),
    )
    assert KIND_CRASH not in [f.kind for f in snap.findings]


def test_post_mortem_of_a_dead_job_is_the_crash_alone():
    snap = build_snapshot(
        [],
        {},
        world_size=2,
        exit_codes={0: 143, 1: 139},
        crashes=(RankCrash(1, 5.0, "segmentation fault (SIGSEGV)"),),
    )
    assert [(f.kind, f.summary) for f in snap.findings] == [
        (KIND_CRASH, "rank 1 failed first: segmentation fault (SIGSEGV)")
    ]


def test_a_job_whose_ranks_all_exited_with_code_0_has_ended():
    snap = build_snapshot([], {}, world_size=2, exit_codes={0: 0, 1: 0})
    assert [(f.kind, f.severity, f.ranks) for f in snap.findings] == [
        ("ended", SEVERITY_INFO, (0, 1))
    ]


def test_ranks_all_gone_without_exit_codes_are_missing_with_no_one_left_waiting():
    snap = build_snapshot([], {}, world_size=2)
    assert [f.kind for f in snap.findings] == [KIND_MISSING]
    assert snap.findings[0].severity == SEVERITY_ERROR
    assert "the other ranks" not in snap.findings[0].summary


def test_an_exception_logged_by_a_rank_that_exited_0_is_no_crash():
    snap = build_snapshot(
        [],
        {},
        world_size=2,
        exit_codes={0: 0, 1: 0},
        crashes=(RankCrash(1, 5.0, "uncaught exception", "KeyError", "x"),),
    )
    assert KIND_CRASH not in [f.kind for f in snap.findings]


# -- threads that differ between ranks ---------------------------------------------------

THREADING = "/usr/lib/python3.11/threading.py"


def with_threads(rank: int, main: tuple[Frame, ...], *workers: str, world=None):
    """Two stuck samples of a rank whose extra threads were started on `workers` functions."""
    target = RankTarget(pid=1000 + rank, rank=rank, world_size=world)
    threads = [ThreadStack(1, "MainThread", main)]
    for index, function in enumerate(workers, start=2):
        frames = (
            Frame("_bootstrap", THREADING, 1002),
            Frame("Thread.run", THREADING, 982),
            Frame(function, TRAIN, 20),
            Frame("Queue.put", "/usr/lib/python3.11/queue.py", 140),
        )
        # The thread's name counts threads started before it: it differs between ranks.
        threads.append(ThreadStack(index, f"Thread-{index + rank} ({function})", frames))
    out = [
        StackSample(target, 100.0 + 0.4 * i, tuple(threads), cpu_seconds=0.0, main_cpu_seconds=0.0)
        for i in range(2)
    ]
    return target, out


def test_a_rank_that_lost_the_thread_its_peers_run_is_named_in_the_verdict():
    blocked = (*at("main", 50), Frame("next_batch", TRAIN, 28))
    jobs = [
        with_threads(0, in_op("all_reduce", "average_gradients", 33), "prefetch", world=3),
        with_threads(1, in_op("all_reduce", "average_gradients", 33), "prefetch", world=3),
        with_threads(2, blocked, world=3),
    ]
    snapshot = build_snapshot([t for t, _ in jobs], {t.pid: s for t, s in jobs}, world_size=3)
    verdict = snapshot.findings[0]
    assert verdict.kind == KIND_OUTLIER and verdict.ranks == (2,)
    assert verdict.summary.endswith(
        "; rank 2 has no thread running prefetch (train.py), which ranks 0-1 have: it may have died"
    )
    # Said once: in the verdict it explains, not again as a finding of its own.
    assert [f.kind for f in snapshot.findings].count(KIND_THREADS) == 0


def test_threads_that_differ_without_a_hang_are_reported_by_themselves():
    jobs = [
        with_threads(0, at("train_step", 10), "prefetch", "log_metrics", world=4),
        with_threads(1, at("train_step", 10), "prefetch", world=4),
        with_threads(2, at("train_step", 10), "prefetch", world=4),
        with_threads(3, at("train_step", 10), world=4),
    ]
    snapshot = build_snapshot([t for t, _ in jobs], {t.pid: s for t, s in jobs}, world_size=4)
    threads = [f for f in snapshot.findings if f.kind == KIND_THREADS]
    assert [(f.ranks, f.severity) for f in threads] == [
        ((3,), SEVERITY_WARNING),
        ((0,), SEVERITY_INFO),
    ]
    assert threads[0].summary == (
        "rank 3 has no thread running prefetch (train.py), which ranks 0-2 have"
    )
    assert threads[1].summary == (
        "rank 0 runs a thread log_metrics (train.py) that ranks 1-3 do not"
    )
    assert all(f.recipe == "missing-thread" for f in threads)


def test_ranks_with_the_same_threads_under_different_names_do_not_differ():
    jobs = [with_threads(r, at("train_step", 10), "prefetch", world=2) for r in range(2)]
    snapshot = build_snapshot([t for t, _ in jobs], {t.pid: s for t, s in jobs}, world_size=2)
    assert not [f for f in snapshot.findings if f.kind == KIND_THREADS]


def test_with_two_ranks_the_one_kept_waiting_for_tells_which_lost_its_thread():
    jobs = [
        with_threads(0, in_op("all_reduce", "average_gradients", 33), "prefetch", world=2),
        with_threads(1, (*at("main", 50), Frame("next_batch", TRAIN, 28)), world=2),
    ]
    snapshot = build_snapshot([t for t, _ in jobs], {t.pid: s for t, s in jobs}, world_size=2)
    assert snapshot.findings[0].summary.endswith(
        "; rank 1 has no thread running prefetch (train.py), which rank 0 has: it may have died"
    )
    assert [f.kind for f in snapshot.findings] == [KIND_OUTLIER]


def _recorded_start_up(name: str) -> tuple[Frame, ...]:
    # py-spy's dumps of a real interpreter held in `site` (tests/data/startup/README.md)
    text = (Path(__file__).parent / "data" / "startup" / name).read_text()
    return parse_pyspy_json(text)[0].frames


def test_a_rank_whose_python_is_still_starting_is_not_stuck():
    # A rank read before its program began: `site` runs a .pth file's line or a
    # sitecustomize, idle on a slow disk (as a healthy job's rank read in CI was).
    for name in (
        "pyspy_site_pth_py3.11.json",
        "pyspy_site_pth_py3.10.json",
        "pyspy_sitecustomize_py3.11.json",
    ):
        frames = _recorded_start_up(name)
        state, _, detail = rank_state(samples(0, frames, frames, frames)[1])
        assert (state, detail) == (
            STATE_RUNNING,
            "Python is still starting (site: .pth files, sitecustomize)",
        ), name
        # beside ranks waiting in the rendezvous: a rank on its way there, graded as one
        waiting = still(in_op("init_process_group", "setup", 20))
        (finding,) = snapshot({0: still(frames), 1: waiting, 2: waiting}).findings
        assert finding.kind == KIND_OUTLIER and finding.ranks == (0,), name
        assert "still starting Python" in finding.summary
        assert ("starting", "init_process_group") in finding.facts
        # every rank still starting: working, and the verdict says where they are
        (finding,) = snapshot({0: still(frames), 1: still(frames)}).findings
        assert finding.kind == KIND_PROGRESSING and finding.severity == SEVERITY_INFO
        assert "; ranks 0-1 are still starting Python (site: .pth files, sitecustomize), at " in (
            finding.summary
        )


def test_a_still_program_is_stuck_wherever_its_code_came_from():
    # `python -c` code, and a program's own import that hangs (its module on a dead mount),
    # are the program's: still and idle, they are stuck as before
    command_line = (Frame("<module>", "<string>", 3), Frame("wait_for_peers", "<string>", 1))
    site_dir = "/srv/venvs/train/lib/python3.11/site-packages"
    own_import = (
        MODULE,
        Frame("_find_and_load", "<frozen importlib._bootstrap>", 1176),
        Frame("<module>", f"{site_dir}/shared_fs_module.py", 4),
    )
    site_named = (Frame("<module>", "/home/me/proj/site.py", 9),)  # a script named site.py
    for frames in (command_line, own_import, site_named):
        assert rank_state(samples(0, frames, frames, frames)[1])[0] == STATE_STUCK, frames
