"""`mldebug nccl` on Flight Recorder dumps with times: real gloo dumps recorded by
tests/data/flight_timing/record.py (3 ranks; in `slow` rank 2 works 3x as long before each
all_reduce, in `healthy` every rank alike with ±10% jitter), and NCCL dumps with `duration_ms`
assembled from the documented format (no NCCL here)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

from mldebug.flight import compare_flight_dumps, read_flight_dump
from mldebug.flight.timing import arrival_findings, entry_order

DATA = Path(__file__).parent / "data" / "flight_timing"


def dumps(scenario: str):
    return [read_flight_dump(str(DATA / scenario / f"comm_lib_trace_rank_{r}")) for r in range(3)]


def test_the_rank_that_enters_last_is_named_per_group_with_the_spread():
    (finding,) = arrival_findings(dumps("slow"))
    assert finding.kind == "straggler" and finding.ranks == (2,)
    assert finding.summary.startswith(
        "Flight Recorder: in the default group, rank 2 was the last to enter 100% of the 40 "
    )
    assert "the first rank in waited a median " in finding.summary
    order = entry_order(dumps("slow"))["0"]
    assert [seq for seq, _, _ in order] == list(range(1, 41))
    assert all(last == 2 and spread > 0.005 for _, last, spread in order)


def test_a_healthy_job_names_nobody():
    assert arrival_findings(dumps("healthy")) == []
    assert [f for f in compare_flight_dumps(dumps("healthy")) if f.kind == "straggler"] == []


def test_collectives_some_rank_did_not_record_are_not_compared():
    some = dumps("slow")
    some[0] = some[0].__class__(**{**some[0].__dict__, "entries": some[0].entries[-5:]})
    assert len(entry_order(some)["0"]) == 5
    assert arrival_findings(some) == []  # too few in common to judge


def test_mldebug_nccl_prints_it():
    files = [str(p) for p in sorted((DATA / "slow").iterdir())]
    done = subprocess.run(
        [sys.executable, "-m", "mldebug", "nccl", *files], capture_output=True, text=True
    )
    assert "rank 2 was the last to enter" in done.stdout, done.stdout + done.stderr


def timed_dump(folder: Path, rank: int, offset: float, durations: list[float]) -> str:
    """A JSON dump as NCCL's Flight Recorder writes it with TORCH_NCCL_ENABLE_TIMING=1 (the
    fields of docs/flight-recorder.md and torch's FlightRecorder.hpp): `duration_ms` on
    every completed entry. Assembled here: no NCCL on this machine."""
    entries = []
    for seq, duration in enumerate(durations, 1):
        created = int((1_767_225_600 + seq * 0.2 + offset) * 1e9)
        entries.append(
            {
                "record_id": seq - 1, "pg_id": 0, "process_group": ["0", "default_pg"],
                "collective_seq_id": seq, "p2p_seq_id": 0, "op_id": seq,
                "profiling_name": "nccl:all_reduce", "time_created_ns": created,
                "input_sizes": [[1024]], "input_dtypes": ["Float"],
                "output_sizes": [[1024]], "output_dtypes": ["Float"],
                "state": "completed", "time_discovered_started_ns": created + 1000,
                "time_discovered_completed_ns": created + int(duration * 1e6),
                "retired": True, "timeout_ms": 600000, "is_p2p": False,
                "duration_ms": duration,
            }
        )  # fmt: skip
    data = {
        "version": "2.10",
        "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2]"}},
        "pg_status": {"0": {"last_enqueued_collective": str(len(durations)),
                            "last_started_collective": str(len(durations)),
                            "last_completed_collective": str(len(durations))}},
        "comm_lib_version": "2.27.5", "nccl_comm_state": {}, "entries": entries,
    }  # fmt: skip
    path = folder / f"nccl_trace_rank_{rank}"
    path.write_text(json.dumps(data))
    return str(path)


def test_duration_ms_names_the_rank_that_waited_least_whatever_the_clocks(tmp_path):
    # GIVEN rank 1 waits least at every all_reduce (it came last) while rank 2's host clock
    # runs 2 s ahead, so that by creation times alone rank 2 would look last.
    rng = random.Random(3)
    paths = [
        timed_dump(tmp_path, 0, 0.0, [30 + rng.uniform(-3, 3) for _ in range(20)]),
        timed_dump(tmp_path, 1, 0.0, [2 + rng.uniform(-1, 1) for _ in range(20)]),
        timed_dump(tmp_path, 2, 2.0, [28 + rng.uniform(-3, 3) for _ in range(20)]),
    ]
    read = [read_flight_dump(p) for p in paths]
    assert all(0.001 <= e.duration <= 0.003 for e in read[1].entries)  # seconds
    (finding,) = arrival_findings(read)
    assert finding.ranks == (1,)
    assert "rank 1 was the last to enter 100% of the 20 collectives" in finding.summary
    # ...and the spread is in the durations' terms (about 28 ms), not the clocks' 2 s.
    spreads = [spread for _, _, spread in entry_order(read)["0"]]
    assert all(0.015 < s < 0.04 for s in spreads)
    # WHEN the durations are gone THEN the clocks decide: rank 2, honestly wrong.
    for path in paths:
        data = json.loads(Path(path).read_text())
        for entry in data["entries"]:
            del entry["duration_ms"]
        Path(path).write_text(json.dumps(data))
    (finding,) = arrival_findings([read_flight_dump(p) for p in paths])
    assert finding.ranks == (2,)
