"""One job's snapshot from several nodes' answers (`mldebug dump --slurm/--hosts`).

Each node has read its own ranks (state from several samples, the main stack's user line
and collective, its agent's state.json as read) and merged its stacks; here the nodes'
ranks are put side by side and judged together by the analysis a local look uses
(analysis.snapshot.ranks_evidence: the agents' collective counts across nodes, the timing
table; then the one judge: every finding, severity graded), so the verdict is the one a dump
on one machine would give. The nodes' stack classes are merged (merge.merge_groups: the cost grows with distinct
stacks, not ranks). A node that did not answer is a finding of its own, naming the node and
what the scheduler says of its ranks.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence, Set
from dataclasses import replace
from itertools import chain, islice
from operator import attrgetter, lt

from mldebug.analysis.merge import build_tree, merge_groups
from mldebug.analysis.pods import pod_evidence
from mldebug.analysis.severity import ERROR_AFTER
from mldebug.analysis.snapshot import Look, judged, ranks_evidence
from mldebug.model import (
    FAIL_TIMEOUT,
    KIND_NODE_UNREACHABLE,
    SEVERITY_ERROR,
    STATE_EXITED,
    STATE_MISSING,
    STATE_UNREADABLE,
    Finding,
    JobSnapshot,
    NodeFailure,
    NodeReading,
    PodStory,
    RankView,
    SourceFindings,
    StackGroup,
)
from mldebug.wording import ranks_text


def unreachable_findings(failures: Sequence[NodeFailure]) -> list[Finding]:
    findings = []
    for failure in failures:
        known = (
            f"its {ranks_text(failure.ranks)} could not be read"
            if failure.ranks
            else "which ranks it runs is unknown"
        )
        said = f"; the scheduler says: {failure.scheduler_state}" if failure.scheduler_state else ""
        what = "pod" if failure.pod else "node"
        findings.append(
            Finding(
                KIND_NODE_UNREACHABLE,
                failure.ranks,
                f"{what} {failure.host} did not answer mldebug collect ({failure.reason}): "
                f"{known}{said}",
                recipe=failure.recipe,
                severity=SEVERITY_ERROR,
            )
        )
    return findings


_RANK = attrgetter("rank")
_STATE = attrgetter("state")


def _in_rank_order(nodes: Sequence[NodeReading], world_size: int | None) -> list[RankView] | None:
    """Every node's ranks in rank order, when the nodes hold ranks that do not overlap, each
    node's in order, and together every rank of the world size (SLURM's block layout,
    torchrun's nodes): the nodes put end to end, no map of ranks made; else None."""
    ordered = sorted((n for n in nodes if n.views), key=lambda n: n.views[0].rank)
    views = list(chain.from_iterable(n.views for n in ordered))
    ranks = list(map(_RANK, views))
    if not ranks or not all(map(lt, ranks, islice(ranks, 1, None))):
        return None  # not in order, or a rank twice
    if world_size is not None and (ranks[0] != 0 or len(ranks) != world_size):
        return None  # ranks missing, or beyond the world size
    return views


def _own(node: NodeReading) -> list[tuple[int, str]]:
    """The node's failures of its own ranks."""
    mine = {v.rank for v in node.views}
    return [(r, why) for r, why in node.failures.items() if r in mine]


def _side_by_side(
    nodes: Sequence[NodeReading],
) -> tuple[dict[int, RankView], list[tuple[StackGroup, ...]], dict[int, str]]:
    """Every node's ranks by rank, each node's groups and failures; a rank two nodes both
    claim is kept from the first, and merged once."""
    views: dict[int, RankView] = {}
    node_groups = []
    failed: dict[int, str] = {}
    for node in nodes:
        mine = {v.rank: v for v in node.views}
        taken: Set[int]
        if len(mine) == len(node.views) and views.keys().isdisjoint(mine):
            views.update(mine)  # the usual case: ranks no node claimed before, each once
            taken = mine.keys()
        else:
            taken = {v.rank for v in node.views if views.setdefault(v.rank, v) is v}
        failed.update((r, why) for r, why in node.failures.items() if r in taken)
        groups = node.groups
        if len(taken) < len(node.views):  # ranks another node had first: not merged twice
            groups = tuple(
                replace(g, ranks=tuple(r for r in g.ranks if r in taken))
                for g in groups
                if any(r in taken for r in g.ranks)
            )
        node_groups.append(groups)
    return views, node_groups, failed


def merge_nodes(
    nodes: Sequence[NodeReading],
    failures: Sequence[NodeFailure] = (),
    world_size: int | None = None,
    job: str = "",
    now: float | None = None,
    pods: Sequence[PodStory] = (),
    sources: Sequence[Callable[[Sequence[RankView]], SourceFindings]] = (),
) -> JobSnapshot:
    """The job's snapshot from its nodes' readings; `failures`: the nodes that gave none;
    `pods`: what Kubernetes says of the job's pods (analysis.pods); `sources`: what else
    speaks of the merged ranks (NCCL RAS, asked through the nodes). A rank two nodes both
    claim is kept from the first (the job key of either is wrong). The ranks as the nodes
    read them are judged together with all of it by the analysis a local look uses
    (analysis.snapshot.ranks_evidence, then the one judge), so the verdict is the one a dump
    on one machine would give."""
    now = time.time() if now is None else now
    if world_size is None:
        sizes = [n.world_size for n in nodes if n.world_size]
        world_size = max(sizes) if sizes else None
    read = None if failures or pods else _in_rank_order(nodes, world_size)
    if read is not None:  # the usual case: every rank once, none missing
        node_groups = [node.groups for node in nodes]
        failed = {r: why for node in nodes if node.failures for r, why in _own(node)}
        told = pod_evidence((), (), now)
    else:
        views, node_groups, failed = _side_by_side(nodes)
        for failure in failures:
            for rank in failure.ranks:
                if rank not in views:
                    views[rank] = RankView(
                        rank=rank,
                        target=None,
                        state=STATE_UNREADABLE,
                        detail=f"its {'pod' if failure.pod else 'node'} {failure.host} did not answer",
                    )
                    failed[rank] = FAIL_TIMEOUT
        told = pod_evidence(pods, views.keys(), now)
        for view in told.views:  # the ranks of pods that ended or never started
            views.setdefault(view.rank, view)
        for rank in range(world_size or 0):
            if rank not in views:
                views[rank] = RankView(
                    rank=rank, target=None, state=STATE_MISSING, detail="no process found"
                )
        read = [views[rank] for rank in sorted(views)]
    ordered, evidence, table = ranks_evidence(
        read,
        world_size,
        failed,
        sorted([c for n in nodes for c in n.crashes] + list(told.crashes), key=lambda c: c.time),
        [e for n in nodes for e in n.events],
        min((n.hang_after for n in nodes if n.hang_after), default=ERROR_AFTER),
    )
    states = dict(zip(map(_RANK, ordered), map(_STATE, ordered), strict=True))
    if STATE_EXITED in states.values():  # rarely: else no rank is looked at
        exited = {rank for rank, state in states.items() if state == STATE_EXITED}
        # a rank that exited is in no group
        node_groups = [
            tuple(g for g in groups if exited.isdisjoint(g.ranks)) for groups in node_groups
        ]
    groups = merge_groups(node_groups, states)
    said = [SourceFindings(found=tuple(unreachable_findings(failures)) + tuple(told.findings))]
    said += [source(ordered) for source in sources]
    snapshot = JobSnapshot(
        time=now,
        ranks=ordered,
        groups=groups,
        tree=build_tree(groups),
        world_size=world_size,
        job=job,
        timing=table,
    )
    return judged(Look(snapshot, evidence), *said)
