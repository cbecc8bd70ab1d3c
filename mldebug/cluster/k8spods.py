"""A Kubernetes job's pods, from `kubectl get ... -o json`: which pods a target names (by
the labels its controller sets), the training container, each pod's ranks (from the
environment the controller injects), and the pod's story (docs/multi-node.md#kubernetes).

Pure functions over the API server's JSON. Everything in it is untrusted text: names are
checked against Kubernetes' own name rules before they go on a command line, every string
kept is cut short and stripped of control characters, and a field of the wrong type is
read as absent, never as a crash.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from datetime import datetime

from mldebug.model import ContainerEnd, PodStory
from mldebug.textsafe import one_line

MAX_TEXT = 300  # a message, an event, a reason
MAX_WARNINGS = 3  # Warning events kept per pod, newest

# Labels the controllers put on the pods they create (their sources, see the docs):
# training-operator v1 (pkg/apis/kubeflow.org/v1/common_types.go), JobSet
# (api/jobset/v1alpha2/jobset_types.go) and Kubeflow Trainer v2, whose TrainJob runs as a
# JobSet of the same name with the training nodes in the replicated job "node".
PYTORCHJOB_NAME = "training.kubeflow.org/job-name"
PYTORCHJOB_OPERATOR = "training.kubeflow.org/operator-name=pytorchjob-controller"
REPLICA_TYPE = "training.kubeflow.org/replica-type"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_GLOBAL_INDEX = "jobset.sigs.k8s.io/job-global-index"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"  # label and annotation
DEFAULT_CONTAINER = "kubectl.kubernetes.io/default-container"  # annotation
TRAINJOB_NODE = "node"  # Trainer's replicated job and container of the training nodes

# The container each controller names for the training process.
CONTAINERS = {"pytorchjob": "pytorch", "trainjob": TRAINJOB_NODE}
KINDS = ("pytorchjob", "trainjob", "jobset", "pod")

# RFC 1123 subdomain (pod and object names), label (container names), and what a label
# selector and a context name may hold: nothing that a command line could read as a flag.
_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_SELECTOR = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/=!, ()-]{0,1023}")
_RANK_ENV = ("RANK", "PET_NODE_RANK", "WORLD_SIZE", "MASTER_ADDR", "PET_NNODES")


def is_name(text: str) -> bool:
    return bool(_NAME.fullmatch(text))


def is_selector(text: str) -> bool:
    return bool(_SELECTOR.fullmatch(text))


@dataclass(frozen=True)
class Target:
    """What `--k8s` names: a kind and a name, or a label selector."""

    kind: str  # one of KINDS, or "selector"
    name: str = ""
    selector: str = ""

    def label(self) -> str:
        return f"{self.kind}/{self.name}" if self.name else f"pods -l {self.selector}"


def parse_target(text: str | None, selector: str | None) -> Target:
    """`pytorchjob/NAME`, `trainjob/NAME`, `jobset/NAME`, `pod/NAME`, or a selector (-l).
    ValueError with what is wrong."""
    if selector is not None:
        if text:
            raise ValueError("give either KIND/NAME or -l SELECTOR, not both")
        if not is_selector(selector):
            raise ValueError(f"-l {selector!r} is not a label selector like app=train,tier!=x")
        return Target("selector", selector=selector)
    kind, sep, name = (text or "").partition("/")
    kind = kind.lower()
    if not sep or kind not in KINDS:
        raise ValueError(f"{text!r}: name it as {'/NAME, '.join(KINDS)}/NAME, or use -l SELECTOR")
    if not is_name(name):
        raise ValueError(f"{name!r} is not a Kubernetes name (lower case, digits, '-', '.')")
    return Target(kind, name)


def selector_of(target: Target) -> str:
    """The label selector of the target's pods ("" for one pod, asked for by name)."""
    if target.kind == "pytorchjob":
        return f"{PYTORCHJOB_NAME}={target.name},{PYTORCHJOB_OPERATOR}"
    if target.kind in ("jobset", "trainjob"):
        return f"{JOBSET_NAME}={target.name}"
    return target.selector


# ---- reading the JSON, field by field ----


def _dict(value: object) -> dict:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list:
    return value if isinstance(value, list) else []


def _text(value: object, limit: int = MAX_TEXT) -> str:
    if not isinstance(value, str):
        return ""
    text = one_line(value[: limit * 4]).strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if -(1 << 31) <= value < (1 << 31) else None
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) < 10:
        return int(value)
    return None


def parse_time(value: object) -> float | None:
    """RFC 3339 as the API server writes it ("2026-12-02T01:02:03Z") in epoch seconds."""
    if not isinstance(value, str) or len(value) > 40:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


_SUFFIXES = {
    "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40, "Pi": 1 << 50, "Ei": 1 << 60,
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18, "m": 1e-3,
}  # fmt: skip
_QUANTITY = re.compile(
    r"([0-9]+(?:\.[0-9]+)?)(?:[eE]([0-9]{1,2}))?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|m)?"
)


def parse_quantity(value: object) -> int | None:
    """A resource quantity ("32Gi", "500M", "1e9", "34359738368") in bytes."""
    if not isinstance(value, str) or len(value) > 40:
        return None
    found = _QUANTITY.fullmatch(value.strip())
    if found is None:
        return None
    number = float(found.group(1)) * 10 ** int(found.group(2) or 0)
    return int(number * _SUFFIXES.get(found.group(3) or "", 1))


def _env(container: dict, meta: dict) -> dict[str, str]:
    """The container's environment as the pod spec gives it: plain values, and the
    metadata fields (annotations, labels, name) a fieldRef points at."""
    env: dict[str, str] = {}
    for item in _list(container.get("env"))[:512]:
        item = _dict(item)
        name = item.get("name")
        if not isinstance(name, str):
            continue
        if isinstance(item.get("value"), str):
            env[name] = item["value"][:256]
            continue
        path = _dict(_dict(item.get("valueFrom")).get("fieldRef")).get("fieldPath")
        found = re.fullmatch(r"metadata\.(annotations|labels)\['([^']{1,253})'\]", str(path))
        if found:
            value = _dict(meta.get(found.group(1))).get(found.group(2))
        elif path == "metadata.name":
            value = meta.get("name")
        else:
            value = None
        if isinstance(value, str):
            env[name] = value[:256]
    return env


def _container(spec: dict, meta: dict, kind: str) -> dict:
    """The training container: the one the pod names as its default, else the controller's
    name for it, else the one that carries rank environment, else the first."""
    containers = [_dict(c) for c in _list(spec.get("containers"))]
    if not containers:
        return {}
    wanted = [
        _dict(meta.get("annotations")).get(DEFAULT_CONTAINER),
        CONTAINERS.get(kind),
    ]
    for name in wanted:
        for container in containers:
            if name and container.get("name") == name:
                return container
    for container in containers:
        if any(_dict(e).get("name") in _RANK_ENV for e in _list(container.get("env"))):
            return container
    return containers[0]


def _ranks(env: dict[str, str], meta: dict) -> tuple[tuple[int, ...], int | None]:
    """The pod's global ranks and the job's world size, from what the controller injects:
    PyTorchJob sets RANK = PET_NODE_RANK = the pod's node rank (master 0, worker i: i+1),
    WORLD_SIZE = pods x PET_NPROC_PER_NODE; Trainer sets PET_NODE_RANK from the Job's
    completion index; a plain indexed Job has JOB_COMPLETION_INDEX. () when unknown (say
    nproc "auto"): the pod's ranks are then only known from what its collector reads."""
    nproc_text = env.get("PET_NPROC_PER_NODE")
    nproc = 1 if nproc_text is None else _int(nproc_text)
    labels = _dict(meta.get("labels"))
    node = _int(env.get("PET_NODE_RANK"))
    if node is None:
        node = _int(env.get("RANK"))
    if node is None and _int(labels.get(JOB_GLOBAL_INDEX)) in (None, 0):
        node = _int(env.get("JOB_COMPLETION_INDEX"))
        if node is None:
            node = _int(_dict(meta.get("annotations")).get(COMPLETION_INDEX))
    world = _int(env.get("WORLD_SIZE"))
    nodes = _int(env.get("PET_NNODES"))
    if world is None and nodes is not None and nproc is not None:
        world = nodes * nproc
    if node is None or nproc is None or not 0 < nproc <= 4096 or node > 1 << 20:
        return (), world
    return tuple(range(node * nproc, (node + 1) * nproc)), world


def _end(value: object) -> ContainerEnd | None:
    data = _dict(value)
    if not data:
        return None
    return ContainerEnd(
        reason=_text(data.get("reason"), 60) or "Terminated",
        exit_code=_int(data.get("exitCode")),
        signal=_int(data.get("signal")),
        finished=parse_time(data.get("finishedAt")),
        message=_text(data.get("message")),
    )


@dataclass(frozen=True)
class PodTarget:
    """One pod to read: its story, and how to reach its ranks with `kubectl exec`."""

    story: PodStory
    container: str  # "" when the pod names none we may put on a command line
    hostname: str  # HOSTNAME inside the pod: spec.hostname, else the pod's name
    world_size: int | None = None
    replicated_job: str = ""  # JobSet's replicated job the pod belongs to


def read_pod(data: object, kind: str = "pod") -> PodTarget | None:
    """One pod of `kubectl get pods -o json`'s items; None when it has no usable name."""
    item = _dict(data)
    meta, spec, status = (_dict(item.get(k)) for k in ("metadata", "spec", "status"))
    name = meta.get("name")
    if not isinstance(name, str) or not is_name(name):
        return None
    container = _container(spec, meta, kind)
    cname = container.get("name")
    cname = cname if isinstance(cname, str) and _LABEL.fullmatch(cname) else ""
    ranks, world = _ranks(_env(container, meta), meta)
    state = next(
        (_dict(s) for s in _list(status.get("containerStatuses")) if _dict(s).get("name") == cname),
        {},
    )
    now, before = _dict(state.get("state")), _dict(state.get("lastState"))
    waiting = _dict(now.get("waiting"))
    limits = _dict(_dict(container.get("resources")).get("limits"))
    unschedulable = ""
    evicted_at = None
    for condition in _list(status.get("conditions")):
        condition = _dict(condition)
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            unschedulable = _text(condition.get("message")) or _text(condition.get("reason"))
        if condition.get("type") == "DisruptionTarget" and condition.get("status") == "True":
            evicted_at = parse_time(condition.get("lastTransitionTime"))
    ended = _end(now.get("terminated"))
    if ended is None and status.get("reason") == "Evicted":
        ended = ContainerEnd("Evicted", finished=evicted_at)
    hostname = spec.get("hostname")
    story = PodStory(
        name=name,
        ranks=ranks,
        node=_text(spec.get("nodeName"), 253),
        phase=_text(status.get("phase"), 20),
        container=cname,
        # No status for the container in a running pod (a status not yet written): it
        # is taken to run, so that its collector says what it does.
        running="running" in now or (not state and status.get("phase") == "Running"),
        restarts=_int(state.get("restartCount")) or 0,
        ended=ended,
        last_end=_end(before.get("terminated")),
        waiting=": ".join(
            t for t in (_text(waiting.get("reason"), 60), _text(waiting.get("message"))) if t
        ),
        memory_limit=parse_quantity(limits.get("memory")),
        reason=_text(status.get("reason"), 60),
        message=_text(status.get("message")),
        unschedulable=unschedulable,
    )
    replicated = _dict(meta.get("labels")).get(REPLICATED_JOB)
    return PodTarget(
        story,
        cname,
        hostname if isinstance(hostname, str) and _LABEL.fullmatch(hostname) else name,
        world,
        replicated if isinstance(replicated, str) else "",
    )


def read_pods(listing: object, kind: str) -> list[PodTarget]:
    """The pods of a `get pods -o json` answer (a List, or one Pod), by name; for a
    TrainJob only its training nodes (not its initializers)."""
    data = _dict(listing)
    items = _list(data.get("items")) if "items" in data else [data]
    pods = [p for p in (read_pod(item, kind) for item in items[:65536]) if p is not None]
    if kind == "trainjob":
        nodes = [p for p in pods if p.replicated_job == TRAINJOB_NODE]
        pods = nodes or pods
    return sorted(pods, key=lambda p: (p.story.ranks[:1] or (1 << 30,), p.story.name))


def with_events(pods: list[PodTarget], listing: object) -> list[PodTarget]:
    """Each pod with its Warning events (`kubectl get events -o json`), newest last."""
    by_pod: dict[str, list[tuple[float, str]]] = {}
    for item in _list(_dict(listing).get("items"))[:100000]:
        item = _dict(item)
        about = _dict(item.get("involvedObject"))
        if item.get("type") != "Warning" or about.get("kind") != "Pod":
            continue
        name = about.get("name")
        if not isinstance(name, str):
            continue
        when = (
            parse_time(item.get("lastTimestamp"))
            or parse_time(item.get("eventTime"))
            or parse_time(_dict(item.get("metadata")).get("creationTimestamp"))
            or 0.0
        )
        said = f"{_text(item.get('reason'), 60)}: {_text(item.get('message'))}"
        by_pod.setdefault(name, []).append((when, said))
    out = []
    for pod in pods:
        events = sorted(by_pod.get(pod.story.name, []))[-MAX_WARNINGS:]
        warnings = tuple(dict.fromkeys(text for _, text in events))
        story = pod.story
        if not story.unschedulable and story.phase == "Pending":
            failed = [t for t in warnings if t.startswith("FailedScheduling: ")]
            if failed:
                story = replace(story, unschedulable=failed[-1].partition(": ")[2])
        out.append(replace(pod, story=replace(story, warnings=warnings)))
    return out


def with_nodes(pods: list[PodTarget], listing: object) -> list[PodTarget]:
    """Each pod with its node's Ready condition, when it is not True (`get nodes -o json`)."""
    problems: dict[str, str] = {}
    data = _dict(listing)
    for item in _list(data.get("items")) if "items" in data else [data]:
        item = _dict(item)
        name = _dict(item.get("metadata")).get("name")
        for condition in _list(_dict(item.get("status")).get("conditions")):
            condition = _dict(condition)
            if condition.get("type") != "Ready" or condition.get("status") == "True":
                continue
            how = "NotReady" if condition.get("status") == "False" else "Ready Unknown"
            why = ": ".join(
                t
                for t in (_text(condition.get("reason"), 60), _text(condition.get("message")))
                if t
            )
            if isinstance(name, str):
                problems[name] = f"{how} ({why})" if why else how
    return [
        replace(p, story=replace(p.story, node_problem=problems[p.story.node]))
        if p.story.node in problems
        else p
        for p in pods
    ]
