"""Reading a Kubernetes job's pods (`dump --k8s`): the API server's answers as kubectl
prints them, turned into the pods' story and judged, against parsing the JSON alone.

    python benchmarks/bench_k8s_pods.py [--pods 16,128,1024] [--repeat 3]

Synthetic, from the recorded PyTorchJob pod of the tests (tests/data/k8s/): N pods of 8
ranks, one in 64 OOMKilled, one in 32 restarted once, one in 128 Pending, and 5 Warning
events per pod in the namespace (more than a busy namespace keeps). Timed, best of
--repeat:
  mldebug     json.loads of the pods, events and nodes answers, reading them
              (cluster.k8spods: read_pods, with_events, with_nodes) and judging the story
              (analysis.pods.pod_evidence)
  json only   json.loads of the same three answers: what any reader pays first
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from pathlib import Path

from mldebug.analysis.pods import pod_evidence
from mldebug.cluster.k8spods import read_pods, with_events, with_nodes

RECORDED = Path(__file__).parent.parent / "tests" / "data" / "k8s" / "pytorchjob-hung.json"
NOW = "2026-12-02T01:00:00Z"


def _stamp(value):
    if isinstance(value, str) and value.startswith("@ago:"):
        return NOW
    if isinstance(value, dict):
        return {k: _stamp(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_stamp(v) for v in value]
    return value


def answers(pods: int) -> tuple[str, str, str]:
    recorded = _stamp(json.loads(RECORDED.read_text()))
    template = recorded["pods"]["items"][1]
    items, events = [], []
    for index in range(pods):
        pod = copy.deepcopy(template)
        name = f"train-worker-{index}"
        pod["metadata"]["name"] = name
        pod["spec"]["nodeName"] = f"gpu-node-{index}"
        for env in pod["spec"]["containers"][0]["env"]:
            if env["name"] in ("RANK", "PET_NODE_RANK"):
                env["value"] = str(index)
            elif env["name"] == "PET_NPROC_PER_NODE":
                env["value"] = "8"
            elif env["name"] == "WORLD_SIZE":
                env["value"] = str(8 * pods)
        status = pod["status"]["containerStatuses"][0]
        if index % 64 == 5:
            status["state"] = {"terminated": {"reason": "OOMKilled", "exitCode": 137,
                                              "finishedAt": NOW}}  # fmt: skip
        elif index % 32 == 7:
            status["restartCount"] = 1
            status["lastState"] = {"terminated": {"reason": "Error", "exitCode": 1,
                                                  "finishedAt": NOW}}  # fmt: skip
        elif index % 128 == 9:
            pod["status"] = {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                 "message": "0/8 nodes are available: 8 Insufficient nvidia.com/gpu."}]}  # fmt: skip
        items.append(pod)
        for n in range(5):
            events.append({"type": "Warning", "reason": "BackOff", "message": f"event {n}",
                           "involvedObject": {"kind": "Pod", "name": name},
                           "lastTimestamp": NOW})  # fmt: skip
    nodes = [{"metadata": {"name": f"gpu-node-{i}"},
              "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
             for i in range(pods)]  # fmt: skip
    return tuple(json.dumps({"kind": "List", "items": x}) for x in (items, events, nodes))


def mldebug(texts: tuple[str, str, str]) -> int:
    listing, events, nodes = (json.loads(t) for t in texts)
    pods = with_nodes(with_events(read_pods(listing, "pytorchjob"), events), nodes)
    evidence = pod_evidence([p.story for p in pods], set(), time.time())
    return len(evidence.findings) + len(evidence.crashes)


def json_only(texts: tuple[str, str, str]) -> int:
    return sum(len(json.loads(t)["items"]) for t in texts)


def best(function, texts, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        function(texts)
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", default="16,128,1024")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"{'pods':>6} {'ranks':>6} {'answers MiB':>12} {'mldebug s':>10} {'json only s':>12}")
    for pods in (int(n) for n in args.pods.split(",")):
        texts = answers(pods)
        size = sum(len(t) for t in texts) / (1 << 20)
        ours, plain = best(mldebug, texts, args.repeat), best(json_only, texts, args.repeat)
        print(f"{pods:>6} {8 * pods:>6} {size:>12.1f} {ours:>10.3f} {plain:>12.3f}")


if __name__ == "__main__":
    main()
