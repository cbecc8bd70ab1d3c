"""`--k8s` without a job: the targets and their labels, the pods read from recorded API
objects (tests/data/k8s/, written from the Kubernetes API reference and the controllers'
sources: training-operator's envvar.go, Trainer's torch plugin, JobSet's labels), and the
pods' story as evidence for the verdict (mldebug.analysis.pods, through the real merge).
No API server exists here; the `kubectl` stand-in (tests/k8s/kubectl) answers the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mldebug.analysis.nodes import merge_nodes
from mldebug.analysis.pods import pod_evidence
from mldebug.cluster.k8spods import (
    Target,
    parse_quantity,
    parse_target,
    read_pods,
    selector_of,
    with_events,
    with_nodes,
)
from mldebug.model import (
    KIND_CRASH,
    KIND_NODE_NOT_READY,
    KIND_POD_NOT_RUNNING,
    KIND_POD_RESTARTS,
    STATE_STUCK,
    ContainerEnd,
    NodeReading,
    PodStory,
    RankView,
)

RECORDED = Path(__file__).parent / "data" / "k8s"
STAND_IN = Path(__file__).parent / "k8s"
NOW = 1_800_000_000.0


def recorded(name: str) -> dict:
    return json.loads((RECORDED / name).read_text())


def pods_of(name: str, kind: str = "pytorchjob"):
    data = recorded(name)
    return read_pods(data["pods"] if "pods" in data else data, kind)


# ---- targets ----


@pytest.mark.parametrize(
    "text, selector",
    [
        ("pytorchjob/train", "training.kubeflow.org/job-name=train,"
         "training.kubeflow.org/operator-name=pytorchjob-controller"),
        ("trainjob/mnist", "jobset.sigs.k8s.io/jobset-name=mnist"),
        ("JobSet/llama.v2", "jobset.sigs.k8s.io/jobset-name=llama.v2"),
        ("pod/train-worker-0", ""),
    ],
)  # fmt: skip
def test_each_kind_finds_its_pods_by_its_controllers_labels(text, selector):
    assert selector_of(parse_target(text, None)) == selector


@pytest.mark.parametrize(
    "text, selector",
    [
        ("deployment/x", None),
        ("pytorchjob/", None),
        ("pytorchjob/Bad_Name", None),
        ("pytorchjob/--kubeconfig=/tmp/x", None),
        ("pytorchjob/x", "app=x"),
        (None, "--all-namespaces"),
        (None, "app=x;rm -rf /"),
    ],
)
def test_a_bad_target_is_refused(text, selector):
    with pytest.raises(ValueError):
        parse_target(text, selector)


def test_a_selector_is_taken_whole():
    assert parse_target(None, "app=train,tier!=web") == Target(
        "selector", selector="app=train,tier!=web"
    )


@pytest.mark.parametrize(
    "text, size",
    [("32Gi", 32 << 30), ("500M", 500_000_000), ("1e9", 10**9), ("1.5Gi", 3 << 29),
     ("34359738368", 34359738368), ("lots", None), ("", None)],
)  # fmt: skip
def test_memory_quantities(text, size):
    assert parse_quantity(text) == size


# ---- pods, ranks, containers ----


def test_pytorchjob_pods_get_their_ranks_from_the_injected_environment():
    pods = pods_of("pytorchjob-hung.json")
    assert [(p.story.name, p.story.ranks, p.container) for p in pods] == [
        ("train-master-0", (0, 1), "pytorch"),
        ("train-worker-0", (2, 3), "pytorch"),
    ]
    assert {p.world_size for p in pods} == {4}
    assert pods[1].story.memory_limit == 32 << 30 and pods[1].story.node == "gpu-node-2"


def test_trainjob_pods_are_its_training_nodes_ranked_by_completion_index():
    pods = pods_of("trainjob-pods.json", "trainjob")
    # The dataset initializer is left out; PET_NODE_RANK points at the completion index.
    assert [(p.story.name, p.story.ranks, p.container, p.hostname) for p in pods] == [
        ("mnist-node-0-0-m3n4b", (0, 1), "node", "mnist-node-0-0"),
        ("mnist-node-0-1-q9w8e", (2, 3), "node", "mnist-node-0-1"),
    ]
    assert {p.world_size for p in pods} == {4}


def test_a_jobset_pod_without_torch_variables_is_ranked_by_its_completion_index():
    data = recorded("trainjob-pods.json")
    pod = data["items"][1]
    pod["spec"]["containers"][0]["env"] = [e for e in pod["spec"]["containers"][0]["env"]
                                           if e["name"] == "JOB_COMPLETION_INDEX"]  # fmt: skip
    (found,) = read_pods({"items": [pod]}, "jobset")
    assert found.story.ranks == (1,)


def test_the_pods_default_container_annotation_wins():
    data = recorded("pytorchjob-hung.json")["pods"]["items"][0]
    sidecar = {"name": "log-shipper", "image": "fluent-bit", "env": []}
    data["spec"]["containers"].insert(0, sidecar)
    (found,) = read_pods({"items": [data]}, "selector")  # no controller: the rank env decides
    assert found.container == "pytorch"
    data["metadata"]["annotations"] = {"kubectl.kubernetes.io/default-container": "log-shipper"}
    (found,) = read_pods({"items": [data]}, "pytorchjob")
    assert found.container == "log-shipper"


def test_events_and_nodes_join_the_pods_story():
    data = recorded("pytorchjob-pending.json")
    pods = with_nodes(
        with_events(read_pods(data["pods"], "pytorchjob"), data["events"]), data["nodes"]
    )
    pending = pods[1].story
    assert pending.phase == "Pending" and not pending.running and pending.node == ""
    assert "Insufficient nvidia.com/gpu" in pending.unschedulable
    assert pending.warnings and pending.warnings[-1].startswith("FailedScheduling: ")
    assert pods[0].story.warnings == ()  # Normal events are not warnings


# ---- the pods' story as evidence ----


def _story(**fields) -> PodStory:
    base = dict(name="train-worker-0", ranks=(2, 3), node="gpu-node-2", phase="Running",
                container="pytorch", running=True, memory_limit=32 << 30)  # fmt: skip
    return PodStory(**{**base, **fields})


def _stuck(rank: int) -> RankView:
    from mldebug.model import Frame, RankTarget, ThreadStack

    frames = (
        Frame("main", "/job/train.py", 30),
        Frame("all_reduce", "torch/distributed/c10d.py", 9),
    )
    return RankView(
        rank,
        RankTarget(pid=100 + rank, rank=rank, world_size=4, host="train-master-0"),
        STATE_STUCK,
        threads=(ThreadStack(1, "MainThread", frames, active=False),),
        user_frame=frames[0],
        collective="all_reduce",
        cpu_percent=0.0,
    )


def _merged(*pods: PodStory):
    node = NodeReading("train-master-0", NOW, (_stuck(0), _stuck(1)), world_size=4)
    return merge_nodes([node], pods=pods, now=NOW)


def test_a_healthy_job_s_pods_say_nothing():
    healthy = [_story(name="train-master-0", ranks=(0, 1)), _story()]
    assert pod_evidence(healthy, {0, 1, 2, 3}, NOW) == pod_evidence([], set(), NOW)
    recorded_healthy = [p.story for p in pods_of("pytorchjob-hung.json")]
    evidence = pod_evidence(recorded_healthy, {0, 1, 2, 3}, NOW)
    assert not evidence.findings and not evidence.crashes and not evidence.views


def test_an_oomkilled_pod_is_the_crash_with_its_limit_and_the_others_wait_for_it():
    oom = ContainerEnd("OOMKilled", exit_code=137, finished=NOW - 180)
    snapshot = _merged(_story(running=False, phase="Failed", ended=oom))
    crash, *rest = snapshot.findings
    assert crash.kind == KIND_CRASH and crash.ranks == (2,) and crash.recipe == "pod-oomkilled"
    assert "OOMKilled at its 32 GiB memory limit about 3 min ago" in crash.summary
    hang = next(f for f in rest if f.kind == "hang")
    assert hang.ranks == (0, 1) and "for ranks 2-3, which are not running" in hang.summary


def test_an_evicted_pod_and_an_error_exit_with_its_signal():
    evicted = _story(running=False, phase="Failed", reason="Evicted",
                     message="The node was low on resource: memory.",
                     ended=ContainerEnd("Evicted", finished=NOW - 60))  # fmt: skip
    crash = _merged(evicted).findings[0]
    assert crash.recipe == "pod-evicted" and "evicted from node gpu-node-2" in crash.summary
    segv = _story(running=False, phase="Failed", ended=ContainerEnd("Error", exit_code=139))
    crash = _merged(segv).findings[0]
    assert "ended with code 139, signal SIGSEGV (Error)" in crash.summary


def test_a_crash_loop_is_named_by_how_its_last_run_ended():
    looping = _story(running=False, waiting="CrashLoopBackOff: back-off 5m0s", restarts=4,
                     last_end=ContainerEnd("Error", exit_code=1, finished=NOW - 30))  # fmt: skip
    crash = _merged(looping).findings[0]
    assert crash.kind == KIND_CRASH and "ended with code 1 (Error)" in crash.summary


def test_pending_restarted_and_node_not_ready_pods_are_findings_with_their_ranks():
    pending = _story(running=False, phase="Pending", node="",
                     unschedulable="0/4 nodes are available: 4 Insufficient nvidia.com/gpu.")  # fmt: skip
    (finding,) = [f for f in _merged(pending).findings if f.kind == KIND_POD_NOT_RUNNING]
    assert finding.ranks == (2, 3) and finding.recipe == "pod-pending"
    restarted = _story(restarts=2, last_end=ContainerEnd("OOMKilled", exit_code=137))
    (finding,) = [f for f in _merged(restarted).findings if f.kind == KIND_POD_RESTARTS]
    assert finding.severity == "warning" and finding.recipe == "pod-oomkilled"
    assert "restarted 2 times" in finding.summary
    lost = _story(node_problem="NotReady (KubeletNotReady: container runtime is down)")
    (finding,) = [f for f in _merged(lost).findings if f.kind == KIND_NODE_NOT_READY]
    assert finding.ranks == (2, 3) and "node gpu-node-2 is NotReady" in finding.summary


def test_a_completed_pod_is_no_crash():
    done = _story(running=False, phase="Succeeded", ended=ContainerEnd("Completed", exit_code=0))
    snapshot = _merged(done)
    assert not [f for f in snapshot.findings if f.kind in (KIND_CRASH, KIND_POD_NOT_RUNNING)]


# ---- the command line ----


def _mldebug(*args: str, recorded_file: str = "pytorchjob-hung.json", path: str | None = None):
    env = {
        **os.environ,
        "PATH": path if path is not None else f"{STAND_IN}{os.pathsep}{os.environ['PATH']}",
        "KUBECTL_RECORDED": str(RECORDED / recorded_file),
    }
    return subprocess.run(
        [sys.executable, "-m", "mldebug", *args], capture_output=True, text=True, env=env,
        timeout=120,
    )  # fmt: skip


@pytest.mark.parametrize(
    "args, said",
    [
        (["--k8s", "deployment/x"], "--k8s"),
        (["--k8s", "pytorchjob/x", "--pid", "1"], "drop TARGET"),
        (["--namespace", "x"], "go with --k8s"),
        (["--k8s", "pod/x", "--namespace", "Bad NS"], "--namespace"),
        (["--k8s", "pod/x", "-n", "research"], "the namespace is --namespace research"),
    ],
)
def test_bad_k8s_arguments_are_one_line(args, said):
    done = _mldebug("dump", *args)
    assert done.returncode == 2 and said in done.stderr and "Traceback" not in done.stderr


def test_no_pods_or_no_kubectl_say_what_to_do():
    done = _mldebug("dump", "--k8s", "pytorchjob/nope", "--namespace", "research")
    assert done.returncode == 3 and "no pods of pytorchjob/nope" in done.stderr
    done = _mldebug("dump", "--k8s", "pod/nope", "--namespace", "research")
    assert done.returncode == 3 and "NotFound" in done.stderr
    done = _mldebug("dump", "--k8s", "pod/x", path=os.path.dirname(sys.executable))
    assert done.returncode == 5 and "kubectl is not installed" in done.stderr


def test_a_restart_long_ago_is_information_only():
    old = _story(
        restarts=9, last_end=ContainerEnd("OOMKilled", exit_code=137, finished=NOW - 86400)
    )
    (finding,) = [f for f in _merged(old).findings if f.kind == KIND_POD_RESTARTS]
    assert finding.severity == "info"


def test_a_loop_of_runs_that_exit_0_is_still_not_running():
    # restartPolicy Always: a container whose process returns 0 is started again and again.
    looping = _story(running=False, waiting="CrashLoopBackOff: back-off 2m40s", restarts=6,
                     last_end=ContainerEnd("Completed", exit_code=0, finished=NOW - 300))  # fmt: skip
    findings = _merged(looping).findings
    assert [f.kind for f in findings if f.kind in (KIND_CRASH, KIND_POD_NOT_RUNNING)] == [
        KIND_POD_NOT_RUNNING
    ]


def test_a_succeeded_pod_without_its_container_status_is_no_finding():
    done = _story(running=False, phase="Succeeded")
    assert not [f for f in _merged(done).findings if f.kind == KIND_POD_NOT_RUNNING]


def test_a_running_pod_whose_container_has_no_status_yet_counts_as_running():
    data = recorded("pytorchjob-hung.json")["pods"]["items"][0]
    data["status"]["containerStatuses"] = []
    (found,) = read_pods({"items": [data]}, "pytorchjob")
    assert found.story.running


def test_many_pods_with_one_story_are_one_finding():
    why = "0/64 nodes are available: 64 Insufficient nvidia.com/gpu."
    pending = [
        _story(name=f"big-worker-{i}", ranks=(2 * i + 2, 2 * i + 3), running=False,
               phase="Pending", node="", unschedulable=why)
        for i in range(64)
    ]  # fmt: skip
    (finding,) = pod_evidence(pending, set(), NOW).findings
    assert finding.ranks == tuple(range(2, 130))
    assert finding.summary.startswith(
        "pods big-worker-0, big-worker-1, big-worker-2, big-worker-3 and 60 more (ranks 2-129) "
        "are not running (Pending): unschedulable: 0/64 nodes"
    )
    lost = [
        _story(name=f"w{i}", ranks=(i,), node=f"n{i}", node_problem="NotReady") for i in range(9)
    ]
    (finding,) = pod_evidence(lost, set(range(9)), NOW).findings
    assert finding.summary.startswith(
        "nodes n0, n1, n2, n3 and 5 more are NotReady: they hold pods w0"
    )


def _mldebug_with(*args: str, **env: str):
    return subprocess.run(
        [sys.executable, "-m", "mldebug", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={
            **os.environ,
            "PATH": f"{STAND_IN}{os.pathsep}{os.environ['PATH']}",
            "KUBECTL_RECORDED": str(RECORDED / "pytorchjob-hung.json"),
            **env,
        },
    )


def test_a_pod_without_mldebug_is_named_with_the_image_to_fix():
    # `env` in the pod finds no such program: what an image without mldebug answers.
    done = _mldebug_with(
        "dump", "--k8s", "pod/train-worker-0", "--namespace", "research", "--json",
        MLDEBUG_REMOTE="/nonexistent/bin/mldebug",
    )  # fmt: skip
    (lost,) = [f for f in json.loads(done.stdout)["findings"] if f["kind"] == "node_unreachable"]
    assert lost["recipe"] == "k8s-exec", lost
    assert "mldebug is not in container pytorch" in lost["summary"]
    assert "install it in the image" in lost["summary"] and lost["ranks"] == [2, 3]


def test_a_pod_that_never_answers_is_cut_at_the_deadline():
    done = _mldebug_with(
        "dump", "--k8s", "pod/train-worker-0", "--namespace", "research", "--json",
        "--deadline", "3",
        MLDEBUG_REMOTE=f"{sys.executable} -c 'import time; time.sleep(120)'",
    )  # fmt: skip
    (lost,) = [f for f in json.loads(done.stdout)["findings"] if f["kind"] == "node_unreachable"]
    assert "no answer within" in lost["summary"] and lost["ranks"] == [2, 3], lost


def test_a_context_kubectl_does_not_know_is_one_clear_line():
    done = _mldebug_with("dump", "--k8s", "pod/x", "--context", "nope")
    assert done.returncode == 2 and 'context "nope" does not exist' in done.stderr
    assert "Traceback" not in done.stderr
