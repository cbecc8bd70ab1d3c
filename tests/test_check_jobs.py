"""`mldebug check` on real gloo ranks of this machine: two jobs, shared by the tests.

- healthy: `mldebug check --nproc-per-node 4`, as a user runs it: every rank joins, the
  collectives and matmuls are measured, and no outlier is named (this machine is small and
  loaded by others: a check that cried wolf here would cry it anywhere).
- nodes: the same launcher starts 4 ranks as 4 "nodes" (each in a UTS namespace of its own,
  as containers on one host): every pair of nodes is measured, and no link is named slow.
- faulty: `mldebug check -- python tests/jobs/check_launcher.py ...`, a user's launcher of
  5 ranks that gives rank 4 a wrong MASTER_PORT and, once rank 2 has joined, puts rank 2 in
  a cgroup with a CPU quota of half a hundredth of a core (real slowness, from the kernel;
  well below what a rank gets on this small machine however loaded). Rank 4 is named as
  unable to join, with the cause; ranks 0-3 are still measured, and rank 2 is named as the
  slow device.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from testkit.cgroups import cpu_cgroup
from testkit.ports import launcher_port

pytestmark = [pytest.mark.long, pytest.mark.multirank]

MLDEBUG = [sys.executable, "-m", "mldebug"]
LAUNCHER = Path(__file__).parent / "jobs" / "check_launcher.py"
# microseconds of CPU per period: half a hundredth of one core (the least quota the kernel
# takes, over a longer period): below what a rank's share of 2 cores comes to even beside
# 30 other busy processes
QUOTA = (1_000, 200_000)


def _check(*args: str, run_dir: Path) -> tuple[subprocess.CompletedProcess, dict]:
    done = subprocess.run(
        [*MLDEBUG, "check", "--json", "--run-dir", str(run_dir), "--time-limit", "240"]
        + ["--bandwidth-seconds", "3", *args],
        capture_output=True,
        text=True,
        timeout=280,
    )
    try:
        report = json.loads(done.stdout)
    except ValueError:
        pytest.fail(f"no JSON report (exit {done.returncode}): {done.stderr[-3000:]}")
    return done, report


@pytest.fixture(scope="module")
def healthy(tmp_path_factory):
    return _check("--nproc-per-node", "4", run_dir=tmp_path_factory.mktemp("c") / "run")


@pytest.fixture(scope="module")
def faulty(tmp_path_factory):
    group = cpu_cgroup(f"mldebug-check-test-{os.getpid()}", *QUOTA)
    if group is None:
        pytest.skip("no writable cgroup CPU controller here (v1 cpu or v2 cpu.max) to cap a rank")
    try:
        wrong = launcher_port()
        run_dir = tmp_path_factory.mktemp("c") / "run"
        launcher = [sys.executable, str(LAUNCHER), str(launcher_port()), "--world", "5"]
        launcher += ["--wrong-port", f"4:{wrong}", "--cap", f"2:{group}"]
        # A longer matmul window: each rank's best batch nears what its share of the
        # machine allows, however loaded (the capped rank's cannot).
        options = ["--join-timeout", "10", "--compute-seconds", "8"]
        done, report = _check(*options, "--", *launcher, run_dir=run_dir)
        yield done, report, wrong
    finally:
        leftover = (group / "cgroup.procs").read_text().split()
        for pid in leftover:  # none: the ranks have ended; should one linger, set it free
            (group.parent / "cgroup.procs").write_text(pid)
        group.rmdir()


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    if subprocess.run(["unshare", "--uts", "true"], capture_output=True).returncode != 0:
        pytest.skip("unshare --uts is not allowed here (it needs root)")
    launcher = [sys.executable, str(LAUNCHER), str(launcher_port()), "--hosts", "na,nb,nc,nd"]
    return _check("--", *launcher, run_dir=tmp_path_factory.mktemp("c") / "run")


def test_every_pair_of_nodes_is_measured_and_none_named_slow(nodes):
    done, report = nodes
    assert done.returncode == 0, (done.stderr[-2000:], report["findings"])
    assert [f["kind"] for f in report["findings"]] == ["check_ok"]
    assert [r["host"] for r in report["ranks"]] == ["na", "nb", "nc", "nd"]
    pairs = {tuple(link["hosts"]): link for link in report["links"]}
    assert sorted(pairs) == [
        ("na", "nb"), ("na", "nc"), ("na", "nd"), ("nb", "nc"), ("nb", "nd"), ("nc", "nd")
    ]  # fmt: skip
    assert all(link["busbw_gbps"] > 0 for link in pairs.values())


def test_a_healthy_job_names_no_outlier(healthy):
    done, report = healthy
    assert done.returncode == 0, (done.stderr[-2000:], report["findings"])
    assert [f["kind"] for f in report["findings"]] == ["check_ok"]
    assert [r["joined"] for r in report["ranks"]] == [True] * 4
    assert all(r["finished"] and r["compute"]["float32"]["tflops"] > 0 for r in report["ranks"])
    ops = {c["op"] for c in report["collectives"]} | set(report["unsupported"])
    assert ops == {"all_reduce", "all_gather", "reduce_scatter"}
    assert all(c["ranks"] == 4 and c["busbw_gbps"] > 0 for c in report["collectives"])
    assert report["gpu"] is False


def test_the_results_stay_in_the_run_directory(healthy):
    done, report = healthy
    saved = json.loads(Path(report["run_dir"], "check.json").read_text())
    assert saved["findings"] == report["findings"] and saved["ranks"] == report["ranks"]
    text = Path(report["run_dir"], "reports", "check.txt").read_text()
    assert "no GPU: CPU variants" in text and "Collectives" in text


def test_a_rank_given_a_wrong_port_is_named_and_the_others_still_measured(faulty):
    done, report, wrong = faulty
    assert done.returncode == 1, done.stderr[-2000:]
    lost = [f for f in report["findings"] if f["kind"] == "connection"]
    assert [f["ranks"] for f in lost] == [[4]], report["findings"]
    assert f"127.0.0.1:{wrong}" in lost[0]["summary"]
    assert "MASTER_PORT" in lost[0]["summary"]
    assert lost[0]["detail"].startswith("it printed: ")  # what the rank itself said
    ranks = {r["rank"]: r for r in report["ranks"]}
    assert [ranks[r]["joined"] for r in range(5)] == [True, True, True, True, False]
    assert all(c["ranks"] == 4 for c in report["collectives"]) and report["collectives"]
    assert all(ranks[r]["compute"]["float32"]["tflops"] > 0 for r in range(4))


def test_a_rank_capped_to_half_a_hundredth_of_a_core_is_the_slow_device(faulty):
    done, report, _ = faulty
    slow = [f for f in report["findings"] if f["kind"] == "slow_device"]
    rates = {r["rank"]: r["compute"] for r in report["ranks"]}
    assert [f["ranks"] for f in slow] == [[2]], (report["findings"], rates)
    assert "rank 2 on " in slow[0]["summary"] and "x the median matmul GFLOPS" in slow[0]["summary"]
    assert slow[0]["recipe"] == "slow-device"
    ratio = report["ranks"][2]["compute"]["float32"]["ratio"]
    assert ratio is not None and ratio < 0.35  # CPU_SLOW_RATIO
    # the failure first, then the outlier
    assert [f["kind"] for f in report["findings"]] == ["connection", "slow_device"]
