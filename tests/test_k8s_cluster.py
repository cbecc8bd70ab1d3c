"""`mldebug dump --k8s` on a real job: 4 gloo ranks on this machine standing for the two
pods of a recorded PyTorchJob (testkit.k8s), read through the `kubectl` stand-in
(tests/k8s/kubectl: recorded `get` answers, `exec` run here with the pod's environment).
The fan-out, every pod's `mldebug collect`, the merge and the analysis are the real code;
only the API server is recorded (none exists here)."""

from __future__ import annotations

import json
import re

import pytest
from testkit.k8s import HANG_JOB, RECORDED

pytestmark = pytest.mark.multirank


def _line(marker: str) -> int:
    lines = HANG_JOB.read_text().splitlines()
    return next(i for i, text in enumerate(lines, 1) if marker in text)


STRAGGLER = f"{HANG_JOB.name}:{_line('STRAGGLER_LINE')}"
K8S = ("dump", "--k8s", "pytorchjob/train", "--namespace", "research")


@pytest.fixture(autouse=True)
def _fresh_log(pod_job):
    (pod_job.folder / "kubectl.log").unlink(missing_ok=True)


def _calls(pod_job) -> list[list[str]]:
    log = pod_job.folder / "kubectl.log"
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    log.unlink(missing_ok=True)
    return calls


def test_dump_names_the_stuck_rank_its_pod_and_line(pod_job):
    done = pod_job.mldebug("pytorchjob-hung.json", *K8S, "--json")
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    first = report["findings"][0]
    assert first["ranks"] == [2] and first["location"].endswith(STRAGGLER), first
    pods = {r["rank"]: r["host"] for r in report["ranks"]}
    assert pods == {
        0: "train-master-0",
        1: "train-master-0",
        2: "train-worker-0",
        3: "train-worker-0",
    }
    # A healthy pod story says nothing: every pod runs, no restart, every node Ready.
    assert not [f for f in report["findings"] if f["kind"].startswith(("pod_", "node_"))]
    # Read-only but for the exec of the collector, with the user's own kubectl.
    calls = _calls(pod_job)
    assert {c[1] for c in calls} == {"get", "exec"}
    execs = [c for c in calls if c[1] == "exec"]
    assert sorted(c[2] for c in execs) == ["train-master-0", "train-worker-0"]
    assert all(c[3] == "--container=pytorch" and "collect" in c for c in execs)


def test_the_text_report_names_the_pod_of_each_rank(pod_job):
    done = pod_job.mldebug("pytorchjob-hung.json", *K8S)
    out = " ".join(done.stdout.split())
    assert "pod train-worker-0 on node gpu-node-2: ranks 2-3" in out
    assert "rank 2 never reached all_reduce: it is stuck in load_shard" in out
    assert STRAGGLER in out


def test_an_oomkilled_pod_is_the_crash_with_its_limit(pod_job):
    done = pod_job.mldebug("pytorchjob-oomkilled.json", *K8S, "--json")
    assert done.returncode == 1, done.stderr
    findings = json.loads(done.stdout)["findings"]
    crash = findings[0]
    assert crash["kind"] == "crash" and crash["ranks"] == [2], findings
    assert "pod train-worker-0 was OOMKilled at its 32 GiB memory limit" in crash["summary"]
    assert crash["recipe"] == "pod-oomkilled"
    hang = next(f for f in findings if f["kind"] == "hang")
    assert hang["ranks"] == [0, 1] and "for ranks 2-3, which are not running" in hang["summary"]
    # The ended pod is not exec'ed into.
    assert [c[2] for c in _calls(pod_job) if c[1] == "exec"] == ["train-master-0"]


def test_a_pending_pod_says_why_it_is_not_scheduled(pod_job):
    done = pod_job.mldebug("pytorchjob-pending.json", *K8S, "--json")
    findings = json.loads(done.stdout)["findings"]
    pending = findings[0]
    assert pending["kind"] == "pod_not_running" and pending["ranks"] == [2, 3], findings
    assert (
        "unschedulable" in pending["summary"]
        and "Insufficient nvidia.com/gpu" in pending["summary"]
    )
    assert pending["recipe"] == "pod-pending"


def test_a_pod_whose_exec_is_refused_is_named_with_what_to_do(pod_job):
    done = pod_job.mldebug("pytorchjob-exec-refused.json", *K8S, "--json")
    report = json.loads(done.stdout)
    (refused,) = [f for f in report["findings"] if f["kind"] == "node_unreachable"]
    assert refused["ranks"] == [2, 3] and refused["recipe"] == "k8s-exec"
    assert "pod train-worker-0 did not answer" in refused["summary"]
    assert "create on pods/exec" in refused["summary"]
    assert {r["rank"]: r["state"] for r in report["ranks"]} == {
        0: "stuck",
        1: "stuck",
        2: "unreadable",
        3: "unreadable",
    }


def test_hostile_object_text_stays_plain_bounded_and_off_the_command_line(pod_job, tmp_path):
    data = json.loads((RECORDED / "pytorchjob-hostile.json").read_text())
    master = data["pods"]["items"][0]["status"]["containerStatuses"][0]
    master["lastState"]["terminated"]["message"] += "A" * 1_000_000  # a huge field
    data["events"]["items"][0]["message"] += "\x1b[2J" * 100_000
    hostile = tmp_path / "hostile.json"
    hostile.write_text(json.dumps(data))
    done = pod_job.mldebug(hostile, *K8S)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "\x1b" not in done.stdout and "\u202e" not in done.stdout
    # Markup in the text is printed as text, not interpreted.
    assert "[link=file:///etc/passwd]click[/link]" in re.sub(r"\s+", "", done.stdout)
    assert len(done.stdout) < 20_000
    assert "node gpu-node-1 is Ready Unknown" in " ".join(done.stdout.split())
    execs = [c for c in _calls(pod_job) if c[1] == "exec"]
    # The pod named like markup is never exec'ed; a container named like a flag is never
    # passed on (that pod has ended anyway).
    assert [c[2] for c in execs] == ["train-master-0"]
    assert not any("--privileged" in arg for c in execs for arg in c)
