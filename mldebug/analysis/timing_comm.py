"""Communication-bound: a property of the job, a fault only with evidence of one.

Half a step or more inside collectives is ordinary for FSDP / ZeRO-3 jobs and small models:
by itself it is info. It is a warning when there is evidence of a fault:

  * the collective share grew over the run (the blocks of agent/timing_blocks.py: the
    median share of the last GROWTH_BLOCKS blocks against the first ones), or
  * the run's NCCL log shows a rank on sockets where InfiniBand was expected (the
    `nccl_network` finding of nccl/compare.py with the sockets recipe), joined by the
    judge (`with_transport_fault`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from mldebug.analysis.timing_hold import common_blocks
from mldebug.model import KIND_NCCL_NETWORK, SEVERITY_INFO, SEVERITY_WARNING, Finding
from mldebug.model.timing import BlockTiming
from mldebug.ranges import format_ranks

KIND_COMM_BOUND = "comm_bound"
RECIPE_SOCKETS = "nccl-sockets-instead-of-ib"
GROWTH_BLOCKS = 8  # blocks at each end compared (8 steps each)
GREW_BY = 0.3  # the share rose this much (absolute; a busy CPU node moves it 0.2)
GREW_RATIO = 1.5  # ...and to this many times the early share


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def share_growth(blocks: Mapping[int, Sequence[BlockTiming]]) -> tuple[float, float, int] | None:
    """(early share, late share, first step of the late blocks) when the collective share
    of every rank's step grew over the run; None when it did not or too few blocks."""
    rows = common_blocks(blocks)
    if len(rows) < 3 * GROWTH_BLOCKS:
        return None
    shares = [
        _median([b.collective / b.wall for b in row.values() if b.wall > 0] or [0.0])
        for row in rows
    ]
    early = _median(shares[:GROWTH_BLOCKS])
    late = _median(shares[-GROWTH_BLOCKS:])
    if late - early < GREW_BY or late < GREW_RATIO * early:
        return None
    first = min(b.first for b in rows[-GROWTH_BLOCKS].values())
    return early, late, first


def comm_bound_finding(
    ranks: Sequence[int], share: float, op: str, growth: tuple[float, float, int] | None
) -> Finding:
    summary = (
        f"every rank spends a median {share * 100:.0f}% of its step inside collectives ({op}) "
        "and none arrives late: communication is most of the step"
    )
    if growth is None:
        return Finding(
            KIND_COMM_BOUND,
            tuple(ranks),
            summary + " (usual for FSDP / ZeRO-3 or a small model; a fault only if it grows "
            "or the NCCL log shows sockets: `mldebug nccl`)",
            recipe=RECIPE_SOCKETS,
            severity=SEVERITY_INFO,
        )
    early, late, step = growth
    return Finding(
        KIND_COMM_BOUND,
        tuple(ranks),
        summary + f", and its share grew over the run from {early * 100:.0f}% to "
        f"{late * 100:.0f}% by step {step}: read the NCCL log with `mldebug nccl` (sockets "
        "instead of InfiniBand? a slower link?)",
        recipe=RECIPE_SOCKETS,
        severity=SEVERITY_WARNING,
        facts=(("share_early", f"{early:.2f}"), ("share_late", f"{late:.2f}")),
    )


def with_transport_fault(findings: Sequence[Finding]) -> list[Finding]:
    """comm_bound made a warning when the NCCL log shows ranks on sockets where InfiniBand
    was expected (the judge joins the two sources here, before grading)."""
    sockets = [f for f in findings if f.kind == KIND_NCCL_NETWORK and f.recipe == RECIPE_SOCKETS]
    if not sockets:
        return list(findings)
    ranks = sorted({r for f in sockets for r in f.ranks})
    on = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {format_ranks(ranks)}"
    return [
        replace(
            f,
            severity=SEVERITY_WARNING,
            then=f"; the NCCL log shows {on} on sockets where InfiniBand was expected",
        )
        if f.kind == KIND_COMM_BOUND and f.severity == SEVERITY_INFO
        else f
        for f in findings
    ]
