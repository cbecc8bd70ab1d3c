"""What Kubernetes says of a job's pods, as evidence for the one verdict of the job.

A pod whose training container has ended (OOMKilled, an error exit, evicted) leaves its
ranks gone with an exit code and a `RankCrash` that says how: the stack reasoning then
names it as the crash and the ranks that wait for it, as for a rank that died on a node.
A pod that does not run yet (unschedulable, an image that does not pull, a crash loop), a
container that restarted and a node that is not Ready are findings of their own, with the
ranks they concern. Pure: from `PodStory` values (mldebug.cluster.k8spods) and the time.
"""

from __future__ import annotations

import signal
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from mldebug.analysis.growth import duration_text
from mldebug.model import (
    KIND_NODE_NOT_READY,
    KIND_POD_NOT_RUNNING,
    KIND_POD_RESTARTS,
    SEVERITY_ERROR,
    SEVERITY_INFO,
    SEVERITY_WARNING,
    STATE_EXITED,
    STATE_MISSING,
    ContainerEnd,
    Finding,
    PodStory,
    RankCrash,
    RankView,
)
from mldebug.wording import ranks_text

GiB = 1 << 30
MiB = 1 << 20
RECENT_RESTART = 3600.0  # seconds: a restart older than this is told as information only


@dataclass(frozen=True)
class PodEvidence:
    views: tuple[RankView, ...]  # the ranks of pods that do not run, which no collector read
    crashes: tuple[RankCrash, ...]  # how the ended pods' ranks ended
    findings: tuple[Finding, ...]  # pods not running yet, restarts, nodes not Ready


def size_text(size: int) -> str:
    """'32 GiB', '1.5 GiB', '512 MiB'."""
    if size >= GiB:
        return f"{size / GiB:.1f}".removesuffix(".0") + " GiB"
    return f"{size / MiB:.0f} MiB"


def _ago(when: float | None, now: float) -> str:
    return f" {duration_text(max(0.0, now - when))} ago" if when is not None else ""


def _signal(end: ContainerEnd) -> str:
    number = end.signal or (end.exit_code - 128 if end.exit_code and end.exit_code > 128 else 0)
    try:
        return f", signal {signal.Signals(number).name}" if number else ""
    except ValueError:
        return ""


def ended_text(pod: PodStory, end: ContainerEnd, now: float) -> str:
    """How the pod's training container ended, for people: the reason Kubernetes gives,
    with what makes it actionable (the memory limit, the exit code and its signal)."""
    where = f"its container {pod.container} in pod {pod.name}"
    when = _ago(end.finished, now)
    if end.reason == "OOMKilled":
        limit = (
            f"at its {size_text(pod.memory_limit)} memory limit"
            if pod.memory_limit
            else "with no memory limit of its own (the node ran out of memory)"
        )
        return f"{where} was OOMKilled {limit}{when} (exit code {end.exit_code or 137})"
    if end.reason == "Evicted" or pod.reason == "Evicted":
        said = f": {pod.message}" if pod.message else ""
        return f"pod {pod.name} was evicted from node {pod.node or '?'}{when}{said}"
    code = f" with code {end.exit_code}{_signal(end)}" if end.exit_code is not None else ""
    said = f": {end.message}" if end.message else ""
    return f"{where} ended{code} ({end.reason}){when}{said}"


def _recipe(pod: PodStory, end: ContainerEnd) -> str:
    if end.reason == "OOMKilled":
        return "pod-oomkilled"
    if end.reason == "Evicted" or pod.reason == "Evicted":
        return "pod-evicted"
    return "rank-crash"


def _not_running(pod: PodStory) -> str:
    """Why a pod that has not ended does not run: what the scheduler or kubelet says."""
    if pod.unschedulable:
        return f"unschedulable: {pod.unschedulable}"
    if pod.waiting:
        return pod.waiting
    if pod.warnings:
        return pod.warnings[-1]
    return "not started yet" if pod.phase == "Pending" else f"phase {pod.phase or 'unknown'}"


def _ranks_of(pod: PodStory) -> str:
    return f" ({ranks_text(pod.ranks)})" if pod.ranks else ""


def pod_evidence(pods: Sequence[PodStory], read: Collection[int], now: float) -> PodEvidence:
    """The pods' story as views, crashes and findings; `read`: the ranks some pod's
    collector answered for (what the ranks say of themselves stands)."""
    views: list[RankView] = []
    crashes: list[RankCrash] = []
    findings: list[Finding] = []
    for pod in pods:
        unread = [r for r in pod.ranks if r not in read]
        end = None if pod.running else pod.ended
        failed_before = pod.last_end is not None and pod.last_end.exit_code != 0
        if end is None and not pod.running and pod.waiting and failed_before:
            end = pod.last_end  # a crash loop: between restarts, the last run's end is why
        if pod.phase == "Succeeded" and end is None:
            end = ContainerEnd("Completed", exit_code=0)  # its container's status is gone
        if end is not None and end.exit_code == 0 and end.reason == "Completed":
            views += [RankView(r, None, STATE_EXITED, exit_code=0) for r in unread]
            continue
        if end is not None:
            how = ended_text(pod, end, now)
            code = end.exit_code if end.exit_code is not None else (137 if end.signal else None)
            views += [RankView(r, None, STATE_EXITED, exit_code=code, detail=how) for r in unread]
            if unread:
                crashes.append(
                    RankCrash(
                        unread[0],
                        end.finished if end.finished is not None else now,
                        how=how,
                        recipe=_recipe(pod, end),
                    )
                )
            else:
                findings.append(
                    Finding(
                        KIND_POD_NOT_RUNNING,
                        pod.ranks,
                        f"{how}; which ranks it ran is not known",
                        recipe=_recipe(pod, end),
                    )
                )
            continue
        if not pod.running:
            why = _not_running(pod)
            views += [
                RankView(r, None, STATE_MISSING, detail=f"its pod {pod.name}: {why}")
                for r in unread
            ]
            findings.append(
                Finding(
                    KIND_POD_NOT_RUNNING,
                    pod.ranks,
                    f"pod {pod.name}{_ranks_of(pod)} is not running ({pod.phase or '?'}): {why}",
                    recipe="pod-pending",
                )
            )
            continue
        if pod.restarts and pod.last_end is not None:
            times = "once" if pod.restarts == 1 else f"{pod.restarts} times"
            # A restart long before this look is history, not what holds the job now.
            finished = pod.last_end.finished
            recent = finished is None or now - finished < RECENT_RESTART
            findings.append(
                Finding(
                    KIND_POD_RESTARTS,
                    pod.ranks,
                    f"pod {pod.name}{_ranks_of(pod)}: its container {pod.container} restarted "
                    f"{times}; the last run ended: {ended_text(pod, pod.last_end, now)}",
                    recipe="pod-oomkilled"
                    if pod.last_end.reason == "OOMKilled"
                    else "pod-restarts",
                    severity=SEVERITY_WARNING if recent else SEVERITY_INFO,
                )
            )
    return PodEvidence(tuple(views), tuple(crashes), tuple(findings + _nodes(pods)))


def _nodes(pods: Sequence[PodStory]) -> list[Finding]:
    by_node: dict[str, list[PodStory]] = {}
    for pod in pods:
        if pod.node and pod.node_problem:
            by_node.setdefault(pod.node, []).append(pod)
    findings = []
    for node, on in sorted(by_node.items()):
        ranks = sorted(r for p in on for r in p.ranks)
        named = ", ".join(p.name for p in on[:4]) + (", ..." if len(on) > 4 else "")
        findings.append(
            Finding(
                KIND_NODE_NOT_READY,
                tuple(ranks),
                f"node {node} is {on[0].node_problem}: it holds pod {named}"
                + (f" ({ranks_text(ranks)})" if ranks else ""),
                recipe="k8s-node-not-ready",
                severity=SEVERITY_ERROR,
            )
        )
    return findings
