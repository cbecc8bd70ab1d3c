"""Findings from what the ranks' agents noticed (events.jsonl): where the first NaN/Inf came
from. Pure functions over RankEvents.

With `--detect-anomaly` each rank reports the first module whose output, input, weight or
gradient went non-finite in a step. Across ranks the origin is the earliest step; within a
step, a rank that saw it in its own forward or backward comes before one that saw it only in
a weight gradient, since DDP averages weight gradients across ranks and hands one rank's
NaN to all of them. The others are named in the detail.
"""

from __future__ import annotations

from collections.abc import Sequence

from mldebug.model import KIND_NONFINITE, SEVERITY_ERROR, Finding, FindingPart, RankEvent

WEIGHT_GRADIENT = "weight gradient"
MAX_OTHERS = 8


def _order(event: RankEvent) -> tuple:
    fields = dict(event.fields)
    return (
        event.step if event.step is not None else -1,
        fields.get("what") == WEIGHT_GRADIENT,
        event.time if event.time is not None else float("inf"),
        event.rank,
    )


def _what_happened(event: RankEvent) -> str:
    """`act (SquaredReLU) output became inf`, from the event's fields (its message else)."""
    fields = dict(event.fields)
    module, cls = fields.get("module"), fields.get("module_type")
    what, value = fields.get("what"), fields.get("value")
    if not (cls and what and value):
        return event.message or "a value became NaN/Inf"
    label = f"{module} ({cls})" if module else cls
    if what == WEIGHT_GRADIENT and fields.get("param"):
        return f"{label} {fields['param']} gradient became {value}"
    return f"{label} {what} became {value}"


def _when(event: RankEvent) -> str:
    return f"step {event.step}" if event.step is not None else "before the first step"


def nonfinite_findings(events: Sequence[RankEvent]) -> list[Finding]:
    """One error finding for the origin of the first NaN/Inf, when any rank reported one."""
    found = sorted((e for e in events if e.kind == KIND_NONFINITE), key=_order)
    if not found:
        return []
    origin = found[0]
    # Each other rank's first report, for the detail.
    others: dict[int, RankEvent] = {}
    for event in found[1:]:
        if event.rank != origin.rank:
            others.setdefault(event.rank, event)
    detail = []
    trail = dict(origin.fields).get("trail")
    if trail:
        detail.append(f"abs-max of the modules before it: {trail}")
    for event in list(others.values())[:MAX_OTHERS]:
        detail.append(f"then rank {event.rank} at {_when(event)}: {_what_happened(event)}")
    if len(others) > MAX_OTHERS:
        detail.append(f"and {len(others) - MAX_OTHERS} more ranks")
    happened = _what_happened(origin)
    if origin.location:
        happened += f", called at {origin.location}"
    return [
        Finding(
            KIND_NONFINITE,
            (origin.rank,),
            f"NaN/Inf from rank {origin.rank} at {_when(origin)}: {happened}",
            location=origin.location,
            recipe="nonfinite-origin",
            detail="; ".join(detail),
            severity=SEVERITY_ERROR,
            parts=tuple(
                FindingPart(
                    (event.rank,), f"{_when(event)}: {_what_happened(event)}", event.location
                )
                for event in [origin, *others.values()][: MAX_OTHERS + 1]
            ),
        )
    ]
