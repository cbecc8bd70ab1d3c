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


MAX_NAMED = 4  # pods named in one finding; the others are counted


def _names(pods: Sequence[PodStory]) -> str:
    """'pod a', 'pods a, b', 'pods a, b, c, d and 60 more'."""
    names = ", ".join(p.name for p in pods[:MAX_NAMED])
    more = f" and {len(pods) - MAX_NAMED} more" if len(pods) > MAX_NAMED else ""
    return f"pod{'s' if len(pods) > 1 else ''} {names}{more}"


def _ranks(pods: Sequence[PodStory]) -> tuple[int, ...]:
    return tuple(sorted({r for p in pods for r in p.ranks}))


def pod_evidence(pods: Sequence[PodStory], read: Collection[int], now: float) -> PodEvidence:
    """The pods' story as views, crashes and findings; `read`: the ranks some pod's
    collector answered for (what the ranks say of themselves stands)."""
    views: list[RankView] = []
    crashes: list[RankCrash] = []
    findings: list[Finding] = []
    waiting: dict[tuple[str, str], list[PodStory]] = {}  # not running, by what is said
    restarted: dict[tuple[str, bool], list[PodStory]] = {}  # by how the last run ended
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
            waiting.setdefault((pod.phase or "?", why), []).append(pod)
            continue
        if pod.restarts and pod.last_end is not None:
            # A restart long before this look is history, not what holds the job now.
            finished = pod.last_end.finished
            recent = finished is None or now - finished < RECENT_RESTART
            restarted.setdefault((pod.last_end.reason, recent), []).append(pod)
    for (phase, why), group in waiting.items():
        ranks = _ranks(group)
        findings.append(
            Finding(
                KIND_POD_NOT_RUNNING,
                ranks,
                f"{_names(group)}{f' ({ranks_text(ranks)})' if ranks else ''} "
                f"{'is' if len(group) == 1 else 'are'} not running ({phase}): {why}",
                recipe="pod-pending",
            )
        )
    for (reason, recent), group in restarted.items():
        ranks = _ranks(group)
        ends = [(p.last_end, p) for p in group if p.last_end is not None]  # all: grouped by it
        end, last = max(ends, key=lambda pair: pair[0].finished or 0.0)
        low, high = min(p.restarts for p in group), max(p.restarts for p in group)
        times = "once" if high == 1 else f"{low if low == high else f'{low}-{high}'} times"
        findings.append(
            Finding(
                KIND_POD_RESTARTS,
                ranks,
                f"{_names(group)}{f' ({ranks_text(ranks)})' if ranks else ''}: the training "
                f"container restarted {times}; the last run ended: "
                f"{ended_text(last, end, now)}",
                recipe="pod-oomkilled" if reason == "OOMKilled" else "pod-restarts",
                severity=SEVERITY_WARNING if recent else SEVERITY_INFO,
            )
        )
    return PodEvidence(tuple(views), tuple(crashes), tuple(findings + _nodes(pods)))


def _nodes(pods: Sequence[PodStory]) -> list[Finding]:
    by_node: dict[str, list[PodStory]] = {}
    for pod in pods:
        if pod.node and pod.node_problem:
            by_node.setdefault(pod.node, []).append(pod)
    by_problem: dict[str, list[str]] = {}
    for node, on in sorted(by_node.items()):
        by_problem.setdefault(on[0].node_problem, []).append(node)
    findings = []
    for problem, nodes in by_problem.items():
        on = [p for node in nodes for p in by_node[node]]
        ranks = _ranks(on)
        named = ", ".join(nodes[:MAX_NAMED])
        named += f" and {len(nodes) - MAX_NAMED} more" if len(nodes) > MAX_NAMED else ""
        findings.append(
            Finding(
                KIND_NODE_NOT_READY,
                ranks,
                f"node{'s' if len(nodes) > 1 else ''} {named} "
                f"{'is' if len(nodes) == 1 else 'are'} {problem}: "
                f"{'it holds' if len(nodes) == 1 else 'they hold'} {_names(on)}"
                + (f" ({ranks_text(ranks)})" if ranks else ""),
                recipe="k8s-node-not-ready",
                severity=SEVERITY_ERROR,
            )
        )
    return findings
