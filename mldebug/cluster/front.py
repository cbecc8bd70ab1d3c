"""The front end of `dump`/`attach --slurm JOBID` and `--hosts HOSTLIST`: run `mldebug
collect` on every node, read the node documents, merge them into one snapshot.

Through SLURM one `srun --overlap` step runs the collector on all the job's nodes (SLURM
fans out itself); through ssh, one `ssh` per host, at most `parallel` at a time; through
pdsh, one `pdsh` that fans out itself. Each has a deadline; whatever answered by then is
used, and every node that did not is named with the reason and what SLURM says of it.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from mldebug.analysis.nodes import merge_nodes
from mldebug.cluster import fanout, slurm
from mldebug.cluster.document import Reader, bulk_reading
from mldebug.cluster.hostlist import compress
from mldebug.cluster.k8s import K8sSpec, exec_argv, exec_failure, find_pods
from mldebug.cluster.nodetargets import COLLECTOR_MARK
from mldebug.errors import MldebugError, ToolMissingError
from mldebug.model import (
    JobSnapshot,
    NativeDump,
    NodeFailure,
    NodeReading,
    PodStory,
    RankView,
    SourceFindings,
    StackSample,
)
from mldebug.ras.verdict import carried_findings
from mldebug.textsafe import one_line
from mldebug.wording import ranks_text

REMOTE_ENV = "MLDEBUG_REMOTE"  # how to start mldebug on a node (default: this Python's)
SSH_OPTIONS_ENV = "MLDEBUG_SSH_OPTIONS"
SSH_DEFAULTS = ("-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-o", "LogLevel=ERROR")
NO_RANKS = 3  # `mldebug collect`'s exit code when a node has no rank process
MAX_POD_NOTES = 16  # pods listed with their ranks above a --k8s report


@dataclass(frozen=True)
class ClusterSpec:
    """Which nodes to read and how (the command line's --slurm/--hosts/--via...)."""

    slurm: str | None = None
    hosts: tuple[str, ...] = ()
    via: str = "ssh"  # for hosts: "ssh" or "pdsh"
    ssh_options: tuple[str, ...] = ()
    run: str | None = None
    deadline: float = 30.0
    parallel: int = fanout.DEFAULT_PARALLEL
    env: dict | None = field(default=None, compare=False)
    collect_options: tuple[str, ...] = ()  # passed on to every node's `mldebug collect`
    k8s: K8sSpec | None = None  # the pods of a Kubernetes job, through kubectl exec


def remote_mldebug() -> list[str]:
    """How a node starts mldebug: $MLDEBUG_REMOTE, else this very Python (the same path on
    every node, as with an environment on a shared filesystem)."""
    given = os.environ.get(REMOTE_ENV, "").strip()
    return shlex.split(given) if given else [sys.executable, "-m", "mldebug"]


def collect_argv(spec: ClusterSpec, collect_deadline: float) -> list[str]:
    # The mark keeps one node's collector from taking another's for a rank (both carry
    # the job's SLURM variables): mldebug.cluster.nodetargets leaves marked processes out.
    argv = ["env", f"{COLLECTOR_MARK}=1", *remote_mldebug()]
    argv += ["collect", "--deadline", f"{collect_deadline:g}"]
    if spec.slurm:
        argv += ["--slurm-job", spec.slurm]
    if spec.run:
        argv += ["--run", spec.run]
    return argv + list(spec.collect_options)


def ssh_options(spec: ClusterSpec) -> list[str]:
    return [*SSH_DEFAULTS, *shlex.split(os.environ.get(SSH_OPTIONS_ENV, "")), *spec.ssh_options]


def outside_allocation(env: dict | None) -> dict:
    """The environment without the variables of an allocation the front end may run in
    (salloc, a batch script): srun would take them for the collector step's own options."""
    base = os.environ if env is None else env
    return {k: v for k, v in base.items() if not k.startswith("SLURM_") or k == "SLURM_CONF"}


def _document(line: bytes) -> dict | None:
    try:
        data = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def _short(host: str) -> str:
    return host.split(".")[0]


def _reason(answer: fanout.Answer) -> str:
    if answer.error:
        return answer.error
    said = [one_line(line) for line in answer.stderr.strip().splitlines() if line.strip()]
    tail = f": {said[-1][:200]}" if said else ""
    return f"exit code {answer.returncode}{tail}"


def _silent(answer: fanout.Answer) -> str:
    """Why a node whose command ended well gave no document."""
    if answer.dropped:
        return (
            "its document came after the answers had filled the front end's cap "
            f"({answer.dropped} line(s) left out)"
        )
    return "no document"


class Collection:
    """One look at the nodes: what each answered, or why not."""

    def __init__(self, spec: ClusterSpec) -> None:
        self.spec = spec
        self.reader = Reader()
        self.nodes: list[NodeReading] = []
        self.failures: list[NodeFailure] = []
        self.notes: list[str] = []
        self.job = ""
        self.pods: list[PodStory] = []  # what Kubernetes says of the job's pods
        self.world_size: int | None = None  # what the pods' environment says, if any

    def _take(self, host: str, line: bytes) -> bool:
        data = _document(line)
        if data is None:
            return False
        self._read(host, data)
        return True

    def _read(self, host: str, data: dict) -> None:
        try:
            self.nodes.append(self.reader.read(data, host))
        except ValueError as error:
            self.failures.append(NodeFailure(host, f"bad node document: {error}"))

    def via_slurm(self) -> None:
        spec = self.spec
        assert spec.slurm is not None  # asked for only with --slurm
        job = slurm.slurm_job(spec.slurm, spec.env)
        self.job = f"SLURM job {job.job}"
        collect = collect_argv(spec, max(1.0, spec.deadline * 0.6))
        minutes = max(1, int(spec.deadline // 60) + 1)
        argv = slurm.srun_collect(job, collect, minutes)
        wanted = {_short(n): n for n in job.nodes}
        answered: set[str] = set()

        def each(line: bytes) -> None:
            # Read as srun passes each document on: only what was read is held, never the
            # text of every node's document at once.
            data = _document(line)
            claimed = data.get("host") if data else None
            node = wanted.get(_short(claimed)) if isinstance(claimed, str) else None
            if data is None or node is None or node in answered:
                return  # not a document, or not from one of the job's nodes
            answered.add(node)
            self._read(node, data)

        answer = fanout.run_one(
            "srun", argv, spec.deadline, outside_allocation(spec.env), each_line=each
        )
        silent = [n for n in job.nodes if n not in answered]
        if not silent:
            return
        states = slurm.node_states(silent, spec.env)
        for node in silent:
            said = states.get(node, "")
            self.failures.append(
                NodeFailure(
                    node,
                    _reason(answer) if answer.returncode != 0 else _silent(answer),
                    job.ranks.get(node, ()),
                    "; ".join(
                        ([f"node {node} {said}"] if said else []) + [f"job {job.job} {job.state}"]
                    ),
                )
            )

    def via_hosts(self) -> None:
        spec = self.spec
        tool = "pdsh" if spec.via == "pdsh" else "ssh"
        if shutil.which(tool, path=(spec.env or os.environ).get("PATH")) is None:
            raise ToolMissingError(
                f"{tool} is not installed here (needed by --hosts --via {spec.via})",
                f"Install it (apt-get install {'pdsh' if tool == 'pdsh' else 'openssh-client'})"
                + (", or use --via ssh." if tool == "pdsh" else "."),
            )
        self.job = compress(list(spec.hosts))
        collect = shlex.join(collect_argv(spec, max(1.0, spec.deadline * 0.6)))
        if spec.via == "pdsh":
            self._pdsh(collect)
            return
        options = ssh_options(spec)
        commands = [(h, ["ssh", *options, h, "--", collect]) for h in spec.hosts]
        answers = fanout.run_many(
            commands, spec.deadline, spec.parallel, spec.env, total=spec.deadline * 4
        )
        for answer in answers:
            self._host_answer(answer.key, answer, answer.lines)

    def _host_answer(self, host: str, answer: fanout.Answer, lines: Iterable[bytes]) -> None:
        if answer.returncode == NO_RANKS:
            said = [one_line(x) for x in answer.stderr.splitlines() if x.strip()]
            self.notes.append(f"{host}: {said[0][:300] if said else 'no rank process there'}")
            return
        if not any(self._take(host, line) for line in reversed(list(lines))):
            self.failures.append(NodeFailure(host, _reason(answer)))

    def _pdsh(self, collect: str) -> None:
        spec = self.spec
        argv = ["pdsh", "-S", "-f", str(spec.parallel), "-u", f"{spec.deadline:g}"]
        argv += ["-w", ",".join(spec.hosts), collect]
        env = dict(spec.env if spec.env is not None else os.environ)
        env.setdefault("PDSH_RCMD_TYPE", "ssh")
        extra = " ".join(shlex.quote(o) for o in ssh_options(spec))
        env.setdefault("PDSH_SSH_ARGS_APPEND", extra)
        answer = fanout.run_one(
            "pdsh", argv, spec.deadline + 5, env, fanout.bytes_for(len(spec.hosts))
        )
        by_host: dict[str, list[bytes]] = {}
        for line in answer.lines:
            said_by, sep, rest = line.partition(b": ")
            if sep:
                by_host.setdefault(said_by.decode("utf-8", "replace"), []).append(rest)
        for host in spec.hosts:
            lines = by_host.get(host, [])
            if not any(self._take(host, line) for line in reversed(lines)):
                why = _reason(answer) if answer.returncode != 0 else _silent(answer)
                self.failures.append(NodeFailure(host, why))

    def via_k8s(self) -> None:
        """Each running pod's training container through `kubectl exec`, at most
        `parallel` at a time; the pods' story from the API server beside it."""
        spec = self.spec
        assert spec.k8s is not None  # asked for only with --k8s
        pods, notes = find_pods(spec.k8s, spec.env)
        self.notes.extend(notes)
        self.pods = [p.story for p in pods]
        namespace = f" in namespace {spec.k8s.namespace}" if spec.k8s.namespace else ""
        self.job = f"{spec.k8s.target.label()}{namespace}"
        sizes = [p.world_size for p in pods if p.world_size]
        self.world_size = max(sizes) if sizes else None
        collect = collect_argv(spec, max(1.0, spec.deadline * 0.6))
        runnable = {p.story.name: p for p in pods if p.story.running and p.container}
        commands = [
            (name, exec_argv(spec.k8s, p, collect, spec.env)) for name, p in runnable.items()
        ]
        answers = fanout.run_many(
            commands, spec.deadline, spec.parallel, spec.env, total=spec.deadline * 4
        )
        for answer in answers:
            pod = runnable[answer.key]
            if answer.returncode == NO_RANKS:
                said = [one_line(x) for x in answer.stderr.splitlines() if x.strip()]
                self.notes.append(f"{answer.key}: {said[0][:300] if said else 'no rank process'}")
            elif not any(self._take(answer.key, line) for line in reversed(answer.lines)):
                self.failures.append(exec_failure(pod, answer))
        read = {node.host: [v.rank for v in node.views] for node in self.nodes}
        for pod in pods[:MAX_POD_NOTES]:  # which pod holds which ranks, and where
            ranks = read.get(pod.story.name) or list(pod.story.ranks)
            self.notes.append(
                f"pod {pod.story.name} on node {pod.story.node or '(none)'}: "
                + (ranks_text(ranks) if ranks else "ranks unknown")
            )
        if len(pods) > MAX_POD_NOTES:
            self.notes.append(
                f"... and {len(pods) - MAX_POD_NOTES} more pods (--json: each rank's pod is its host)"
            )

    def snapshot(self) -> JobSnapshot:
        sizes = [n.world_size for n in self.nodes if n.world_size] + [self.world_size or 0]
        answers = [node.ras for node in self.nodes if node.ras is not None]

        def ras(views: Sequence[RankView]) -> SourceFindings:
            """NCCL RAS, as the nodes carried it, judged with every node's stacks."""
            said = carried_findings(views, answers)
            self.notes.extend(n for n in said.notes if n not in self.notes)
            return said

        return merge_nodes(
            self.nodes,
            self.failures,
            world_size=max(sizes) or None,
            job=self.job,
            pods=self.pods,
            sources=[ras] if answers else [],
        )


def collect_cluster(spec: ClusterSpec, lasting: bool = False) -> tuple[JobSnapshot, list[str]]:
    """Read every node once: the merged snapshot, and notes for the user. `lasting`: the
    process ends with this snapshot (dump), which is kept out of the cycle collector's
    passes (document.bulk_reading)."""
    collection = Collection(spec)
    with bulk_reading(lasting):
        if spec.k8s is not None:
            collection.via_k8s()
        elif spec.slurm and not spec.hosts:
            collection.via_slurm()
        else:
            collection.via_hosts()
        if not collection.nodes and not collection.failures and not collection.pods:
            raise MldebugError(
                "\n".join(["no node has rank processes of yours to read", *collection.notes]),
                "Check the host list, or that the job runs.",
                exit_code=3,
            )
        snapshot = collection.snapshot()
    notes = list(collection.notes)
    for node in collection.nodes:
        notes.extend(f"{node.host}: {note}" for note in node.notes)
    return snapshot, notes


class ClusterPoller:
    """What `attach --slurm/--hosts` polls: one collection of every node per refresh (each
    node judges stuck from running with its own samples, so no history is kept here)."""

    def __init__(self, spec: ClusterSpec, first: JobSnapshot | None = None) -> None:
        self.spec = spec
        self.first = first  # a snapshot already taken (attach checks the job before the UI)

    def poll(self) -> JobSnapshot:
        first, self.first = self.first, None
        return first if first is not None else collect_cluster(self.spec)[0]

    def read_native(self, rank: int) -> StackSample | None:
        return None  # native frames are read on the node: `mldebug dump --native` there

    def read_all_threads(self, rank: int) -> NativeDump | None:
        # The rank screen's `g` shows this line where gdb's answer would be.
        raise MldebugError(
            "gdb reads a rank's threads on its own node: `mldebug dump --native-all` there"
        )

    def focus(self, ranks: Iterable[int]) -> None:
        pass

    def close(self) -> None:
        fanout.stop_all()  # a collection still running when the view quits


def parse_hosts(text: str) -> tuple[str, ...]:
    from mldebug.cluster.hostlist import expand

    try:
        return tuple(expand(text))
    except ValueError as error:
        raise MldebugError(
            f"--hosts {text!r}: {error}", "Write hosts as SLURM does: node[01-04],node07"
        ) from None
