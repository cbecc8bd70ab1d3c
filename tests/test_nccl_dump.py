"""`mldebug dump --run DIR` reads the run's NCCL logs and the ranks' stderr with the same
code as `mldebug nccl`.

A real 2-rank gloo job runs under `mldebug run --nccl-debug INFO` to its end: rank 1 skips
an all_reduce, rank 0 times out in it. gloo writes no NCCL lines, so the NCCL logs of a
2-rank job with mixed NCCL versions (tests/data/nccl/versions, assembled from NCCL's
documented format) are then put where NCCL_DEBUG_FILE writes them, <run>/nccl/.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from mldebug.nccl.scan import run_findings

pytestmark = pytest.mark.multirank

DATA = Path(__file__).parent / "data" / "nccl"
SCRIPT = textwrap.dedent(
    """
    import time
    from datetime import timedelta
    import torch
    import torch.distributed as dist

    # A long timeout to meet (ranks import torch at their own pace on a loaded machine),
    # a short one for the collective rank 1 skips.
    dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    group = dist.new_group(timeout=timedelta(seconds=5))
    t = torch.ones(4)
    dist.all_reduce(t, group=group)
    if dist.get_rank() == 1:
        time.sleep(20)  # skips the second all_reduce
    else:
        dist.all_reduce(t, group=group)
    """
)


@pytest.fixture(scope="module")
def ended_run(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("nccl-dump")
    script = folder / "skip.py"
    script.write_text(SCRIPT)
    run_dir = folder / "run"
    done = subprocess.run(
        [sys.executable, "-m", "mldebug", "run", "--run-dir", str(run_dir)]
        + ["--nproc-per-node", "2", "--nccl-debug", "INFO", str(script)],
        capture_output=True,
        timeout=240,
        env={**__import__("os").environ, "MLDEBUG_RUNS_DIR": str(folder / "runs")},
    )
    assert done.returncode != 0, done.stderr[-2000:]
    assert (run_dir / "nccl").is_dir()  # --nccl-debug made it (empty: gloo)
    return run_dir


def dump_json(run_dir: Path) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "mldebug", "dump", "--run", str(run_dir), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout)


def test_dump_of_the_ended_run_names_the_rank_that_did_not_time_out(ended_run):
    report = dump_json(ended_run)
    gloo = [f for f in report["findings"] if f["kind"] == "dist_error"]
    assert [f["ranks"] for f in gloo] == [[1]]
    assert "rank 0 timed out in a gloo collective" in gloo[0]["summary"]
    assert gloo[0]["recipe"] == "rank-outside-collective"


def test_dump_shows_the_findings_of_the_runs_nccl_logs(ended_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(ended_run, run, symlinks=True)
    for log in (DATA / "versions").iterdir():
        shutil.copy(log, run / "nccl" / log.name)
    report = dump_json(run)
    versions = [f for f in report["findings"] if f["kind"] == "nccl_version"]
    # two ranks on two versions: neither is the odd one, both are named
    assert versions and versions[0]["ranks"] == [0, 1]
    assert versions[0]["recipe"] == "nccl-version-mismatch"
    assert "2.18.1 on rank 1; 2.19.3 on rank 0" in versions[0]["summary"]
    text = subprocess.run(
        [sys.executable, "-m", "mldebug", "dump", "--run", str(run)],
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    assert "nccl_version" in text and "nccl-version-mismatch" in text


def test_a_run_without_nccl_logs_whose_ranks_did_not_fail_is_not_read(tmp_path):
    rank = tmp_path / "ranks" / "0"
    rank.mkdir(parents=True)
    (rank / "stderr.log").write_bytes((DATA / "watchdog_2.4/ranks/0/stderr.log").read_bytes())
    assert run_findings(tmp_path, failed=False) == []
    assert [f.kind for f in run_findings(tmp_path, failed=True)] == ["nccl_timeout"]


def test_dump_compares_the_flight_recorder_dumps_in_the_run(ended_run, tmp_path):
    # Real dumps of a 3-rank gloo job where rank 2 called broadcast as its #4 while ranks
    # 0-1 called all_reduce (tests/data/flight/skipped), where `mldebug run
    # --flight-recorder` puts them: <run>/fr/rank_<rank>, beside its request file.
    run = tmp_path / "run"
    shutil.copytree(ended_run, run, symlinks=True)
    (run / "fr").mkdir()
    for rank in range(3):
        dump = DATA.parent / "flight" / "skipped" / f"comm_lib_trace_rank_{rank}"
        shutil.copy(dump, run / "fr" / f"rank_{rank}")
    (run / "fr" / "request").write_text("")
    report = dump_json(run)
    flight = [f for f in report["findings"] if "flight_recorder" in f["sources"]]
    assert [(f["kind"], f["ranks"]) for f in flight] == [("mismatch", [2])]
