"""torch 2.15's text, read by `explain`, `nccl` and the run's timeout report: nccl2's timeouts
(no WorkNCCL(SeqNum=...)) and torchrun's "${hostname}:${rank}: " line prefix. The log is
written from the formats in torch 2.15's sources (tests/data/torch215/README.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from mldebug.analysis.exit_waits import timeout_of
from mldebug.nccl.logformats import prefixes

pytestmark = pytest.mark.compat  # cheap; .ci/compat runs it on each end of the range

DATA = Path(__file__).parent / "data" / "torch215"
LOG = DATA / "nccl2_timeout_hostname_rank_prefix.log"


def mldebug(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mldebug", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "NO_COLOR": "1", "COLUMNS": "200"},
    )


def test_the_hostname_rank_prefix_names_host_and_rank():
    assert prefixes("gpu-a07:3: [E1202 03:12:44.1 WorkNCCL.cpp:190] x") == ("gpu-a07", 3, 11)
    assert prefixes("r12i0n8.cluster:15: Fatal Python error") == ("r12i0n8.cluster", 15, 20)
    # NCCL's own head (host:pid:tid) and a clock are not such prefixes
    assert prefixes("gpu-a07:4242:4250 [0] NCCL INFO Init COMPLETE")[1] is None
    assert prefixes("12:34: done")[1] is None  # a clock, not a host
    assert prefixes("12: done") == (None, 12, 4)  # srun --label, as before


def test_explain_names_the_rank_missing_from_nccl2_timeouts():
    done = mldebug("explain", "--json", str(LOG))
    assert done.returncode == 1, done.stderr
    top = json.loads(done.stdout)["findings"][0]
    assert top["ranks"] == [2] and top["recipe"] == "nccl-watchdog-timeout"
    assert "ranks 0-1,3 of at least 4 timed out in a collective of PG 0" in top["summary"]
    assert f"{LOG}:2" in top["evidence"]


def test_nccl_reads_each_ranks_nccl2_timeout_and_host():
    done = mldebug("nccl", "--json", str(LOG))
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    ranks = {r["rank"]: r for r in report["ranks"]}
    assert sorted(ranks) == [0, 1, 3]
    assert all(r["hosts"] == ["gpu-a07"] for r in ranks.values())
    timeouts = {rank: r["timeouts"] for rank, r in ranks.items()}
    assert timeouts[1] == [
        {
            "pg": "0",
            "seq": None,
            "op": None,
            "numel_in": None,
            "numel_out": None,
            "timeout_ms": None,
            "ran_ms": 600038,
            "blocking_wait": False,
        }
    ]
    # the log line and the exception of rank 0 are one timeout
    assert len(timeouts[0]) == 1 and timeouts[0][0]["ran_ms"] == 600041


def test_the_runs_timeout_report_reads_nccl2_errors():
    text = LOG.read_text()
    found = timeout_of("torch.distributed.DistBackendError: " + text.splitlines()[-1])
    assert found is not None and found.nccl_seq is None and found.nccl_op is None
    assert timeout_of(text.splitlines()[1]) is not None


def test_held_out_two_nodes_name_the_rank_that_saved_a_checkpoint():
    done = mldebug("explain", "--json", str(DATA / "nccl2_two_nodes.log"))
    top = json.loads(done.stdout)["findings"][0]
    assert top["ranks"] == [6] and "ranks 0-5,7 of at least 8" in top["summary"]


def test_held_out_the_exception_alone_is_a_timeout_of_each_rank():
    done = mldebug("explain", "--json", str(DATA / "nccl2_exception_only.log"))
    top = json.loads(done.stdout)["findings"][0]
    assert top["recipe"] == "nccl-watchdog-timeout" and top["ranks"] == [0, 1]
