"""The front end's Kubernetes side (`dump`/`attach --k8s`): find the job's pods with
kubectl, read their story (pods, Warning events, nodes), and run `mldebug collect` in
each pod's training container with `kubectl exec`, bounded (docs/multi-node.md#kubernetes).

Only the user's kubeconfig and permissions are used: kubectl is started with an argument
list (never a shell), under a deadline, with its output read bounded; every call is a
read (`get`) except the `exec` of the collector. What the API server answers is data
(mldebug.cluster.k8spods checks it).
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass

from mldebug.cluster import fanout
from mldebug.cluster.k8spods import (
    PodTarget,
    Target,
    read_pods,
    selector_of,
    with_events,
    with_nodes,
)
from mldebug.errors import MldebugError, NoTargetError, PermissionDeniedError, ToolMissingError
from mldebug.model import NodeFailure
from mldebug.textsafe import one_line

KUBECTL_ENV = "MLDEBUG_KUBECTL"  # another kubectl to run (a path), as KUBECTL is for others
GET_DEADLINE = 20.0
NO_RANKS = 3  # `mldebug collect`'s exit code when it finds no rank process


@dataclass(frozen=True)
class K8sSpec:
    """Which pods (--k8s TARGET or -l SELECTOR) and where (--namespace, --context)."""

    target: Target
    namespace: str | None = None
    context: str | None = None


def kubectl(spec: K8sSpec, env: dict | None) -> list[str]:
    """kubectl with the user's own kubeconfig, the context and namespace asked for."""
    tool = (env if env is not None else os.environ).get(KUBECTL_ENV) or "kubectl"
    if shutil.which(tool, path=(env if env is not None else os.environ).get("PATH")) is None:
        raise ToolMissingError(
            f"{tool} is not installed here (needed by --k8s)",
            "Install kubectl (https://kubernetes.io/docs/tasks/tools/) and a kubeconfig "
            "that reaches the cluster, or set MLDEBUG_KUBECTL to its path.",
        )
    argv = [tool]
    if spec.context:
        argv.append(f"--context={spec.context}")
    if spec.namespace:
        argv.append(f"--namespace={spec.namespace}")
    return argv


def _said(answer: fanout.Answer) -> str:
    lines = [one_line(x).strip() for x in answer.stderr.splitlines() if x.strip()]
    return lines[-1][:300] if lines else ""


def get_json(spec: K8sSpec, args: list[str], env: dict | None, required: bool = True) -> object:
    """`kubectl get ARGS -o json`, read whole (bounded), as JSON; None when `required` is
    False and kubectl failed (a read the user may not be allowed: nodes, events)."""
    argv = kubectl(spec, env) + ["get", *args, "--output=json", "--request-timeout=15s"]
    answer = fanout.run_one("kubectl", argv, GET_DEADLINE, env)
    text = b"".join(answer.lines)
    data: object = None
    if text.strip():
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            data = None
    if answer.returncode == 0 and isinstance(data, dict):
        return data
    if not required:
        return data if isinstance(data, dict) else None
    if answer.returncode == 0:
        why = f"its answer is not one JSON object of at most {fanout.MAX_BYTES >> 20} MiB"
    else:
        why = answer.error or _said(answer) or f"exit code {answer.returncode}"
    low = why.lower()
    if "notfound" in low or "not found" in low:
        raise NoTargetError(
            f"kubectl get {' '.join(args)}: {why}",
            "Check the name and the namespace (--namespace; kubectl get pods -A).",
        )
    error = PermissionDeniedError if "forbidden" in low else MldebugError
    raise error(
        f"kubectl get {' '.join(args)} failed: {why}",
        "Check the context and namespace (--context, --namespace) and that your role may "
        "get and list pods there (kubectl auth can-i list pods).",
    )


def find_pods(spec: K8sSpec, env: dict | None) -> tuple[list[PodTarget], list[str]]:
    """The target's pods with their story; notes on what could not be read (events,
    nodes). NoTargetError when it has no pod."""
    target = spec.target
    if target.kind == "pod":
        listing = get_json(spec, ["pod", target.name], env)
    else:
        listing = get_json(spec, ["pods", f"--selector={selector_of(target)}"], env)
    pods = read_pods(listing, target.kind)
    if not pods:
        where = f" in namespace {spec.namespace}" if spec.namespace else ""
        raise NoTargetError(
            f"no pods of {target.label()}{where} (selector {selector_of(target)!r})",
            f"Check the name and namespace: kubectl get {target.kind}s --namespace=...; a job "
            "that waits in a queue (Kueue, Volcano) has no pods yet.",
        )
    notes: list[str] = []
    events = get_json(
        spec, ["events", "--field-selector=involvedObject.kind=Pod"], env, required=False
    )
    if events is None:
        notes.append("the pods' events could not be read (kubectl get events)")
    else:
        pods = with_events(pods, events)
    names = sorted({p.story.node for p in pods if p.story.node})
    if names:
        nodes = get_json(spec, ["nodes", *names], env, required=False)
        if nodes is None:
            notes.append("the nodes' state could not be read (kubectl get nodes)")
        else:
            pods = with_nodes(pods, nodes)
    return pods, notes


def exec_argv(spec: K8sSpec, pod: PodTarget, collect: list[str], env: dict | None) -> list[str]:
    """`kubectl exec POD --container=C -- COLLECT`: the collector in the training
    container, narrowed to the pod's own processes (--pod: its HOSTNAME)."""
    return [
        *kubectl(spec, env),
        "exec",
        pod.story.name,
        f"--container={pod.container}",
        "--",
        *collect,
        "--host",
        pod.story.name,
        "--pod",
        pod.hostname,
    ]


_NOT_INSTALLED = (
    "executable file not found",
    "no such file or directory",
    "no module named mldebug",
    "command not found",
)


def exec_failure(pod: PodTarget, answer: fanout.Answer) -> NodeFailure:
    """A pod that gave no document, with what to do about it."""
    said = _said(answer)
    low = said.lower()
    story = pod.story
    state = f"pod {story.phase or '?'} on node {story.node or '?'}"
    if answer.error:
        return NodeFailure(story.name, answer.error, story.ranks, state, "k8s-exec", pod=True)
    if "forbidden" in low or "pods/exec" in low:
        why = (
            f"kubectl exec was refused ({said}): your role needs the verb create on "
            "pods/exec in this namespace"
        )
    elif answer.returncode in (126, 127) or any(s in low for s in _NOT_INSTALLED):
        why = (
            f"mldebug is not in container {pod.container} ({said or 'exit code 127'}): "
            "install it in the image (pip install mldebug py-spy), or set MLDEBUG_REMOTE "
            "to how it starts there"
        )
    else:
        why = f"exit code {answer.returncode}" + (f": {said}" if said else "")
    return NodeFailure(story.name, why, story.ranks, state, "k8s-exec", pod=True)
