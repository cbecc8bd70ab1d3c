"""A DDP straggler named from torch's own Flight Recorder: 3 ranks of DistributedDataParallel
under `mldebug run`, rank 1 computing 2x as long (a host wait, as a GPU rank's thread waits
for its kernels). DDP's gradient all-reduces are C++, unseen by the agent's Python trace: the
agent reads them from the Flight Recorder, which torch 2.15 keeps one ring per backend
(agent/flight.py). One job, so that .ci/compat runs it on each end of the supported range too.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from testkit.jobs import dump_json, start, stop, wait_ready
from testkit.torchfeatures import needs_gloo_flight_recorder

from mldebug.analysis.timing import judge_timing
from mldebug.files.rundir import RunPaths
from mldebug.launch.stragglers import read_views

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "straggler.py"
PATH_ENV = {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
pytestmark = [pytest.mark.multirank, pytest.mark.compat, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def ddp(tmp_path_factory):
    needs_gloo_flight_recorder()  # torch 2.4 records NCCL only: no DDP rows on gloo
    folder = tmp_path_factory.mktemp("ddp")
    log = folder / "ddp.console"
    with log.open("wb") as err:
        proc, run_dir = start(
            folder,
            EXAMPLE,
            3,
            name="ddp",
            args=(
                "--ddp",
                "--slow-rank",
                "1",
                "--factor",
                "2",
                "--compute-ms",
                "40",
                "--steps",
                "0",
                "--host-waits",  # compute as a host wait: 3 ranks beside the suite's others
            ),
            stderr=err,
            env={"NO_COLOR": "1", **PATH_ENV},
        )
    try:
        wait_ready(proc, run_dir, 3, marker="READY")
        yield run_dir, log, time.monotonic()
    finally:
        stop(proc)


def test_the_ddp_straggler_is_named_from_the_flight_recorder(ddp):
    run_dir, log, ready = ddp
    deadline = ready + 120
    while time.monotonic() < deadline and "is the straggler" not in log.read_text(errors="replace"):
        time.sleep(0.5)
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if "is the straggler" in ln]
    assert lines, log.read_text(errors="replace")[-2000:]
    assert lines[0].startswith(
        "mldebug: rank 1 is the straggler: it enters the all_reduce calls the Python trace "
        "does not see (DDP's, in torch's Flight Recorder) last at "
    )
    _, report = dump_json(run_dir)
    timing = {"straggler", "input_bound", "comm_bound", "host_sync"}
    found = [(f["kind"], f["ranks"]) for f in report["findings"] if f["kind"] in timing]
    assert found == [("straggler", [1])]
    # The two ranks that wait for it, judged alone, are alike: nobody is named.
    views = [v for v in read_views(RunPaths(run_dir)) if v.rank != 1]
    assert all(v.agent.timing.flight for v in views)
    assert judge_timing(views).findings == ()
