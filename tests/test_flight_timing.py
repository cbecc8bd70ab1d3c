"""`mldebug nccl` on Flight Recorder dumps with times: real gloo dumps recorded by
tests/data/flight_timing/record.py (3 ranks; in `slow` rank 2 works 3x as long before each
all_reduce, in `healthy` every rank alike with ±10% jitter)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from mldebug.nccl.flight import compare_flight_dumps, read_flight_dump
from mldebug.nccl.flight_timing import arrival_findings, entry_order

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
