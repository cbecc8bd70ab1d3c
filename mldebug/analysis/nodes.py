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
from collections.abc import Callable, Sequence
from dataclasses import replace

from mldebug.analysis.judge import Evidence
from mldebug.analysis.merge import build_tree, merge_groups
from mldebug.analysis.pods import pod_evidence
from mldebug.analysis.sequence import sequence_verdict
from mldebug.analysis.snapshot import Look, as_waiting, judged
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
    speaks of the merged ranks (NCCL RAS, asked through the nodes). All are heard before the
    one judge's verdict. A rank two nodes both claim is kept from the first (the job key of
    either is wrong)."""
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
                    detail=f"its {'pod' if failure.pod else 'node'} {failure.host} did not answer",
                )
    told = pod_evidence(pods, set(views), now)
    for view in told.views:  # the ranks of pods that ended or never started
        views.setdefault(view.rank, view)
    for rank in range(world_size or 0):
        if rank not in views:
            views[rank] = RankView(
                rank=rank, target=None, state=STATE_MISSING, detail="no process found"
            )
    ordered = [views[rank] for rank in sorted(views)]
    sequence = sequence_verdict(ordered)
    ordered = [as_waiting(view, sequence.waits.get(view.rank)) for view in ordered]
    states = {v.rank: v.state for v in ordered}
    groups = merge_groups(
        [
            tuple(g for g in groups if all(states.get(r) != STATE_EXITED for r in g.ranks))
            for groups in node_groups
        ],
        states,
    )
    failed = {r: FAIL_TIMEOUT for f in failures for r in f.ranks}
    crashes = sorted(
        [c for n in nodes for c in n.crashes] + list(told.crashes), key=lambda c: c.time
    )
    events = [e for n in nodes for e in n.events]
    said = [SourceFindings(found=tuple(unreachable_findings(failures)) + tuple(told.findings))]
    said += [source(ordered) for source in sources]
    evidence = Evidence(
        views=tuple(ordered),
        world_size=world_size,
        failures=failed,
        crashes=tuple(crashes),
        sequence=sequence,
        events=tuple(events),
    )
    snapshot = JobSnapshot(
        time=now,
        ranks=tuple(ordered),
        groups=groups,
        tree=build_tree(groups),
        world_size=world_size,
        job=job,
    )
    return judged(Look(snapshot, evidence), *said)
