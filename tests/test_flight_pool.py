"""Reading many Flight Recorder dumps with worker processes (flight/pool.py): the same
dumps, in the same order, as reading them one by one; bad files are one line each; a
deadline stops the reading without waiting for the workers."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from mldebug.flight import compare_flight_dumps, read_flight_dump
from mldebug.flight.pool import read_flight_dumps, worker_count

BEHIND = Path(__file__).parent / "data" / "flight" / "behind"


def copies(tmp_path: Path, count: int) -> list[str]:
    source = BEHIND / "comm_lib_trace_rank_0"
    paths = []
    for rank in range(count):
        path = tmp_path / f"comm_lib_trace_rank_{rank}"
        shutil.copyfile(source, path)
        paths.append(str(path))
    return paths


def test_workers_read_what_one_process_reads(tmp_path):
    paths = copies(tmp_path, 20)
    (tmp_path / "broken").write_bytes(b"\x80\x02}q\x00(X\x07\x00\x00\x00version")
    paths.insert(5, str(tmp_path / "broken"))
    dumps, problems, unread = read_flight_dumps(paths, workers=2)
    alone = [read_flight_dump(p) for p in paths if not p.endswith("broken")]
    assert dumps == alone and unread == 0
    assert len(problems) == 1 and problems[0].startswith(str(tmp_path / "broken"))
    assert compare_flight_dumps(dumps) == compare_flight_dumps(alone)


def test_a_deadline_passed_leaves_the_rest_unread_and_returns(tmp_path):
    paths = copies(tmp_path, 40)
    started = time.monotonic()
    dumps, problems, unread = read_flight_dumps(paths, deadline=time.monotonic(), workers=2)
    assert len(dumps) + unread == 40 and not problems
    assert time.monotonic() - started < 60  # bounded: the workers are stopped, not awaited


def test_few_files_or_one_core_read_in_process_and_else_a_worker_a_core():
    assert worker_count(3) == 0 and worker_count(1024, cores=1) == 0
    assert worker_count(1024, cores=2) == 2  # a laptop: both cores read
    assert worker_count(1024, cores=64) == 16 and worker_count(40, cores=64) == 6
