"""One job's snapshot from several nodes' answers (`mldebug dump --slurm/--hosts`).

Each node has already judged its own ranks (state from several samples, the main stack's
user line and collective, its agent) and merged its stacks; here the nodes' ranks are put
side by side, the agents' collective counts compared across nodes, the nodes' stack classes
merged (merge.merge_groups: the cost grows with distinct stacks, not ranks), and the same
findings as for a local job are made. A node that did not answer is a finding of its own,
naming the node and what the scheduler says of its ranks.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace

from mldebug.analysis.findings import find_problems
from mldebug.analysis.merge import build_tree, merge_groups
from mldebug.analysis.sequence import sequence_verdict
from mldebug.analysis.snapshot import as_waiting
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
    RankView,
)
from mldebug.wording import ranks_text


def unreachable_findings(failures: Sequence[NodeFailure]) -> list[Finding]:
    findings = []
    for failure in failures:
        known = (
            f"its ranks {ranks_text(failure.ranks)} could not be read"
            if failure.ranks
            else "which ranks it runs is unknown"
        )
        said = f"; the scheduler says: {failure.scheduler_state}" if failure.scheduler_state else ""
        findings.append(
            Finding(
                KIND_NODE_UNREACHABLE,
                failure.ranks,
                f"node {failure.host} did not answer mldebug collect ({failure.reason}): "
                f"{known}{said}",
                recipe="node-unreachable",
                severity=SEVERITY_ERROR,
            )
        )
    return findings


def merge_nodes(
    nodes: Sequence[NodeReading],
    failures: Sequence[NodeFailure] = (),
    world_size: int | None = None,
    job: str = "",
    now: float | None = None,
) -> JobSnapshot:
    """The job's snapshot from its nodes' readings; `failures`: the nodes that gave none.
    A rank two nodes both claim is kept from the first (the job key of either is wrong)."""
    now = time.time() if now is None else now
    views: dict[int, RankView] = {}
    node_groups = []
    for node in nodes:
        taken = {v.rank for v in node.views if views.setdefault(v.rank, v) is v}
        groups = node.groups
        if len(taken) < len(node.views):  # ranks another node had first: not merged twice
            groups = tuple(
                replace(g, ranks=tuple(r for r in g.ranks if r in taken))
                for g in groups
                if any(r in taken for r in g.ranks)
            )
        node_groups.append(groups)
    if world_size is None:
        sizes = [n.world_size for n in nodes if n.world_size]
        world_size = max(sizes) if sizes else None
    for failure in failures:
        for rank in failure.ranks:
            if rank not in views:
                views[rank] = RankView(
                    rank=rank,
                    target=None,
                    state=STATE_UNREADABLE,
                    detail=f"its node {failure.host} did not answer",
                )
    for rank in range(world_size or 0):
        if rank not in views:
            views[rank] = RankView(
                rank=rank, target=None, state=STATE_MISSING, detail="no process found"
            )
    ordered = [views[rank] for rank in sorted(views)]
    sequence = sequence_verdict(ordered)
    ordered = [as_waiting(view, sequence.waits.get(view.rank)) for view in ordered]
    states = {v.rank: v.state for v in ordered}
    exited = {rank for rank, state in states.items() if state == STATE_EXITED}
    if exited:  # a rank that exited is in no group (rarely any: else no rank is looked at)
        node_groups = [
            tuple(g for g in groups if exited.isdisjoint(g.ranks)) for groups in node_groups
        ]
    groups = merge_groups(node_groups, states)
    failed = {r: FAIL_TIMEOUT for f in failures for r in f.ranks}
    crashes = sorted((c for n in nodes for c in n.crashes), key=lambda c: c.time)
    events = [e for n in nodes for e in n.events]
    findings = find_problems(ordered, world_size, failed, crashes, sequence=sequence, events=events)
    errors = [f for f in findings if f.severity == SEVERITY_ERROR]
    rest = [f for f in findings if f.severity != SEVERITY_ERROR]
    return JobSnapshot(
        time=now,
        ranks=tuple(ordered),
        groups=groups,
        tree=build_tree(groups),
        findings=tuple(errors + unreachable_findings(failures) + rest),
        world_size=world_size,
        job=job,
    )
