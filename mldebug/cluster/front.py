"""The front end of `dump`/`attach --slurm JOBID` and `--hosts HOSTLIST`: run `mldebug
collect` on every node, read the node documents, merge them into one snapshot.

Through SLURM one `srun --overlap` step runs the collector on all the job's nodes (SLURM
fans out itself); through ssh, one `ssh` per host, at most `parallel` at a time; through
pdsh, one `pdsh` that fans out itself. Each has a deadline; whatever answered by then is
used, and every node that did not is named with the reason and what SLURM says of it.
"""

from __future__ import annotations

import gc
import json
import os
import shlex
import shutil
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from mldebug.analysis.nodes import merge_nodes
from mldebug.cluster import fanout, slurm
from mldebug.cluster.document import Reader
from mldebug.cluster.hostlist import compress
from mldebug.cluster.nodetargets import COLLECTOR_MARK
from mldebug.collect.ras import with_carried
from mldebug.errors import MldebugError, ToolMissingError
from mldebug.model import JobSnapshot, NodeFailure, NodeReading, StackSample
from mldebug.textsafe import one_line

REMOTE_ENV = "MLDEBUG_REMOTE"  # how to start mldebug on a node (default: this Python's)
SSH_OPTIONS_ENV = "MLDEBUG_SSH_OPTIONS"
SSH_DEFAULTS = ("-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-o", "LogLevel=ERROR")
NO_RANKS = 3  # `mldebug collect`'s exit code when a node has no rank process


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


class Collection:
    """One look at the nodes: what each answered, or why not."""

    def __init__(self, spec: ClusterSpec):
        self.spec = spec
        self.reader = Reader()
        self.nodes: list[NodeReading] = []
        self.failures: list[NodeFailure] = []
        self.notes: list[str] = []
        self.job = ""

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
                    _reason(answer) if answer.returncode != 0 else "no document",
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
        answer = fanout.run_one("pdsh", argv, spec.deadline + 5, env)
        by_host: dict[str, list[bytes]] = {}
        for line in answer.lines:
            said_by, sep, rest = line.partition(b": ")
            if sep:
                by_host.setdefault(said_by.decode("utf-8", "replace"), []).append(rest)
        for host in spec.hosts:
            lines = by_host.get(host, [])
            if not any(self._take(host, line) for line in reversed(lines)):
                self.failures.append(NodeFailure(host, _reason(answer)))

    def snapshot(self) -> JobSnapshot:
        snapshot = merge_nodes(self.nodes, self.failures, job=self.job)
        answers = [node.ras for node in self.nodes if node.ras is not None]
        if not answers:
            return snapshot
        snapshot, said = with_carried(snapshot, answers)  # NCCL RAS, judged with every stack
        self.notes.extend(n for n in said if n not in self.notes)
        return snapshot


@contextmanager
def _collector_paused() -> Iterator[None]:
    """What the front end reads lives on until the report: the cyclic garbage collector
    walking it again and again as it grows (131,072 ranks' views) cost about a tenth of the
    front end. Paused while the documents are read and merged (bounded by the deadline),
    as it was after."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def collect_cluster(spec: ClusterSpec) -> tuple[JobSnapshot, list[str]]:
    """Read every node once: the merged snapshot, and notes for the user."""
    collection = Collection(spec)
    with _collector_paused():
        if spec.slurm and not spec.hosts:
            collection.via_slurm()
        else:
            collection.via_hosts()
        if not collection.nodes and not collection.failures:
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

    def __init__(self, spec: ClusterSpec, first: JobSnapshot | None = None):
        self.spec = spec
        self.first = first  # a snapshot already taken (attach checks the job before the UI)

    def poll(self) -> JobSnapshot:
        first, self.first = self.first, None
        return first if first is not None else collect_cluster(self.spec)[0]

    def read_native(self, rank: int) -> StackSample | None:
        return None  # native frames are read on the node: `mldebug dump --native` there

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
