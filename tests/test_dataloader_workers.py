"""A rank that waits for its DataLoader is judged by its worker's line (hand-built samples)."""

from mldebug.analysis.frames import (
    is_dataloader_worker,
    waits_for_dataloader,
    worker_user_frame,
)
from mldebug.analysis.snapshot import build_snapshot
from mldebug.analysis.workers import with_workers, worker_thread
from mldebug.collect.workers import is_worker_cmdline
from mldebug.model import (
    FAIL_PERMISSION,
    KIND_OUTLIER,
    KIND_STUCK,
    SEVERITY_ERROR,
    Frame,
    RankTarget,
    StackSample,
    ThreadStack,
)

SITE = "/venv/lib/python3.11/site-packages"
STDLIB = "/usr/lib/python3.11"
LOADER = f"{SITE}/torch/utils/data/dataloader.py"
WORKER = f"{SITE}/torch/utils/data/_utils/worker.py"
FETCH = f"{SITE}/torch/utils/data/_utils/fetch.py"
C10D = f"{SITE}/torch/distributed/distributed_c10d.py"
TRAIN = "/home/me/proj/train.py"
DATA = "/home/me/proj/data.py"

OUTER = (Frame("<module>", TRAIN, 90), Frame("main", TRAIN, 80))
LOOP = Frame("train", TRAIN, 42)  # for batch in loader:
# The main thread of a rank waiting for a batch from worker processes (py-spy 0.4 names).
WAITING = (
    *OUTER,
    LOOP,
    Frame("_BaseDataLoaderIter.__next__", LOADER, 725),
    Frame("_MultiProcessingDataLoaderIter._next_data", LOADER, 1505),
    Frame("_MultiProcessingDataLoaderIter._get_data", LOADER, 1464),
    Frame("_MultiProcessingDataLoaderIter._try_get_data", LOADER, 1291),
    Frame("Queue.get", f"{STDLIB}/multiprocessing/queues.py", 113),
    Frame("_PollLikeSelector.select", f"{STDLIB}/selectors.py", 415),
)
# num_workers=0: the dataset runs on the rank's own stack, under the DataLoader frames.
IN_PROCESS = (
    *OUTER,
    LOOP,
    Frame("_BaseDataLoaderIter.__next__", LOADER, 725),
    Frame("_SingleProcessDataLoaderIter._next_data", LOADER, 1452),
    Frame("_MapDatasetFetcher.fetch", FETCH, 54),
    Frame("Shards.__getitem__", DATA, 17),
    Frame("sleep", "<built-in>", None, native=True),
)
# A forked worker keeps its parent's stack down to the line that started it.
FORKED = (
    *OUTER,
    LOOP,
    Frame("DataLoader.__iter__", LOADER, 505),
    Frame("BaseProcess._bootstrap", f"{STDLIB}/multiprocessing/process.py", 314),
    Frame("_worker_loop", WORKER, 374),
)
STUCK_WORKER = (
    *FORKED,
    Frame("_MapDatasetFetcher.fetch", FETCH, 54),
    Frame("Shards.__getitem__", DATA, 17),
)
IDLE_WORKER = (*FORKED, Frame("Queue.get", f"{STDLIB}/multiprocessing/queues.py", 117))
IN_ALL_REDUCE = (*OUTER, Frame("sync", TRAIN, 50), Frame("all_reduce", C10D, 3000))


def test_waiting_for_workers_is_told_from_loading_in_the_rank_itself():
    assert waits_for_dataloader(WAITING)
    assert waits_for_dataloader(WAITING[:-2])  # py-spy caught it in _try_get_data itself
    assert not waits_for_dataloader(IN_PROCESS)  # the dataset's line is the rank's own
    assert not waits_for_dataloader(IN_ALL_REDUCE)
    assert not waits_for_dataloader(())


def test_a_workers_line_is_below_its_worker_loop():
    assert is_dataloader_worker(STUCK_WORKER) and is_dataloader_worker(IDLE_WORKER)
    assert worker_user_frame(STUCK_WORKER) == Frame("Shards.__getitem__", DATA, 17)
    # Idle, it has no line of its own: not the inherited `for batch in loader`.
    assert worker_user_frame(IDLE_WORKER) is None
    assert not is_dataloader_worker(IN_ALL_REDUCE) and worker_user_frame(IN_ALL_REDUCE) is None


def test_worker_command_lines():
    rank = ["/venv/bin/python", "-u", "train.py", "--lr", "0.1"]
    assert is_worker_cmdline(rank, rank)  # fork: the parent's own command line
    assert is_worker_cmdline(
        [
            "/venv/bin/python",
            "-c",
            "from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5, pipe_handle=7)",
            "--multiprocessing-fork",
        ],
        rank,
    )
    assert not is_worker_cmdline(
        ["/venv/bin/python", "-c", "from multiprocessing.forkserver import main; main(3, 4)"], rank
    )
    assert not is_worker_cmdline(["nvidia-smi", "-q"], rank)


def _sample(pid, *threads, rank=None, failure=None, time=100.0):
    return StackSample(
        RankTarget(pid=pid, rank=rank),
        time,
        threads=tuple(threads),
        failure=failure,
        main_cpu_seconds=0.0,
        cpu_seconds=0.0,
    )


def _main(frames, tid):
    return ThreadStack(1, "MainThread", frames, os_thread_id=tid)


def test_with_workers_puts_readable_workers_next_to_the_main_thread():
    feeder = ThreadStack(2, "QueueFeederThread", (), os_thread_id=12)
    rank = _sample(10, _main(WAITING, 10), feeder, rank=3)
    workers = [
        _sample(21, _main(STUCK_WORKER, 21)),
        _sample(22, failure=FAIL_PERMISSION),
        _sample(23, _main(IN_ALL_REDUCE, 23)),
    ]  # a child that is no DataLoader worker
    merged = with_workers(rank, workers)
    assert [t.name for t in merged.threads] == [
        "MainThread",
        "DataLoader worker 21",
        "QueueFeederThread",
    ]
    assert merged.threads[1].pid == 21 and merged.threads[0].pid is None
    assert worker_thread(workers[1]) is None
    assert with_workers(rank, workers[1:]) is rank


def _job(per_rank):
    """per_rank: rank -> (main frames, worker stacks); three identical samples each."""
    targets, samples = [], {}
    for rank, (frames, worker_stacks) in per_rank.items():
        pid = 1000 + rank
        rank_samples = []
        for index in range(3):
            sample = _sample(pid, _main(frames, pid), rank=rank, time=100.0 + 0.4 * index)
            if index == 2:
                sample = with_workers(
                    sample,
                    [
                        _sample(pid * 10 + n, _main(stack, pid * 10 + n))
                        for n, stack in enumerate(worker_stacks)
                    ],
                )
            rank_samples.append(sample)
        targets.append(rank_samples[0].target)
        samples[pid] = rank_samples
    return build_snapshot(targets, samples, world_size=len(per_rank))


def test_the_outlier_is_named_by_its_stuck_workers_line():
    snap = _job(
        {
            0: (IN_ALL_REDUCE, ()),
            1: (IN_ALL_REDUCE, ()),
            2: (IN_ALL_REDUCE, ()),
            3: (WAITING, (IDLE_WORKER, STUCK_WORKER)),
        }
    )
    (finding,) = snap.findings
    assert (finding.kind, finding.ranks, finding.severity) == (KIND_OUTLIER, (3,), SEVERITY_ERROR)
    assert finding.location == f"{DATA}:17"
    assert finding.summary.startswith(
        "rank 3 never reached all_reduce: it waits for its DataLoader, whose worker (pid 10031) "
        f"is stuck in Shards.__getitem__ ({DATA}:17), while ranks 0-2 wait in all_reduce at "
    )
    assert "mldebug dump --ranks 3" in finding.detail
    view = snap.ranks[3]
    assert view.dataloader_worker == 10031 and view.user_frame == Frame(
        "Shards.__getitem__", DATA, 17
    )
    # The merged tree and groups still show the rank's own main thread.
    assert snap.groups[-1].ranks == (3,) and snap.groups[-1].user_frame == LOOP


def test_idle_workers_leave_the_ranks_own_line():
    snap = _job({0: (IN_ALL_REDUCE, ()), 1: (WAITING, (IDLE_WORKER, IDLE_WORKER))})
    (finding,) = snap.findings
    assert finding.location == LOOP.location and "DataLoader" not in finding.summary
    assert snap.ranks[1].dataloader_worker is None


def test_ranks_stuck_in_the_same_worker_line_are_one_group():
    snap = _job(
        {0: (IN_ALL_REDUCE, ()), 1: (WAITING, (STUCK_WORKER,)), 2: (WAITING, (STUCK_WORKER,))}
    )
    (finding,) = snap.findings
    assert finding.ranks == (1, 2)
    assert (
        "they wait for their DataLoaders, whose workers (pids 10010, 10020) are stuck in "
        "Shards.__getitem__" in finding.summary
    )


def test_a_lone_process_stuck_in_its_loader_says_where_the_worker_is():
    snap = _job({0: (WAITING, (STUCK_WORKER,))})
    (finding,) = snap.findings
    assert finding.kind == KIND_STUCK and finding.location == f"{DATA}:17"
    assert "worker (pid 10000) is stuck in Shards.__getitem__" in finding.summary


def test_workers_are_read_only_for_a_rank_seen_waiting_twice():
    from mldebug.analysis.workers import waits_for_workers
    from mldebug.collect.collector import JobCollector
    from mldebug.model import JobTargets

    waiting, busy = _sample(7, _main(WAITING, 7)), _sample(7, _main(IN_PROCESS, 7))
    with JobCollector(JobTargets(()), pyspy="/bin/true") as collector:

        def waits(taken):  # this poll's readings, after the previous poll's (as observe does)
            return waits_for_workers(collector.with_previous(7, taken))

        assert waits([waiting, waiting])
        assert not waits([busy, waiting])  # a healthy rank, caught once
        assert not waits([waiting, busy])
        assert waits([waiting])  # a one-sample dump: nothing to compare
        collector._last[7] = busy  # a live view compares with the previous poll
        assert not waits([waiting])


def test_views_show_the_worker_next_to_the_rank():
    from mldebug.report.text import render_text
    from mldebug.tui.widgets.rank_detail import rank_text

    snap = _job({0: (IN_ALL_REDUCE, ()), 1: (WAITING, (STUCK_WORKER,))})
    report = render_text(snap, ranks=[1], width=200)
    assert "rank 1  pid 1001" in report and "waits for DataLoader worker 10010" in report
    assert '"DataLoader worker 10010"' in report and f"Shards.__getitem__ ({DATA}:17)" in report
    screen = rank_text(snap.ranks[1]).plain
    assert "Shards.__getitem__ (in DataLoader worker 10010)" in screen
    assert screen.index('"MainThread"') < screen.index('"DataLoader worker 10010"')


STARTS_CHILDREN = """\
import multiprocessing, subprocess, time

def sit():
    time.sleep(600)

if __name__ == "__main__":
    started = [multiprocessing.get_context(how).Process(target=sit)
               for how in ("fork", "spawn", "forkserver")]
    for child in started:
        child.start()
    other = subprocess.Popen(["sleep", "600"])  # a child that is no worker
    print(*(child.pid for child in started), other.pid, flush=True)
    time.sleep(600)
"""


def test_worker_candidates_are_children_started_by_multiprocessing(tmp_path):
    import os
    import signal
    import subprocess
    import sys

    from mldebug.collect.workers import worker_candidates

    script = tmp_path / "parent.py"
    script.write_text(STARTS_CHILDREN)
    parent = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        *workers, other = map(int, parent.stdout.readline().split())
        # the resource tracker, the fork server and `sleep` are children too, but no workers
        assert worker_candidates(parent.pid, limit=10) == sorted(workers)
        assert other not in worker_candidates(parent.pid, limit=10)
        assert len(worker_candidates(parent.pid, limit=2)) == 2
    finally:
        os.killpg(parent.pid, signal.SIGKILL)
        parent.wait()
