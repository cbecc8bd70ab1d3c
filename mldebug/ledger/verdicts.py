"""From the ledger's verdict to a finding: one table, whichever source saw it.

`compare_group` (ledger/compare.py) says who is behind, who is mismatched and whether every member
waits (a hang). Five sources feed it: the agents' live states (analysis/sequence.py), their
last states at exit (analysis/exit_waits.py), torch's Flight Recorder dumps
(flight/compare.py), the NCCL watchdog's lines (nccl/compare_errors.py) and NCCL RAS's
launch counts (ras/verdict.py). Each adapter only translates its source into the
ledger's form and words the finding; the kind, the base severity and the recipe of a
verdict come from `OUTCOMES` here, and `ledger_finding` fills the finding's fields the same
way for all of them. So "a rank behind" is one kind and one recipe whoever saw it, and the
judge (analysis/judge.py) can merge what two sources say about one collective.

Membership is the ledger's too: `members_of` (which ranks belong to a group, given what each
rank called on) is used by the live and the exit-time adapters alike.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import mldebug.ledger.rules as rules
from mldebug.model import (
    KIND_HANG,
    KIND_MISMATCH,
    KIND_OUTLIER,
    SEVERITY_ERROR,
    CollectiveRef,
    Finding,
    FindingPart,
)

VERDICT_BEHIND = "behind"  # members never made call #M the others wait in
VERDICT_MISMATCH = "mismatch"  # members' call #N differ
VERDICT_HANG = "hang"  # every member made #M, none has seen it complete
VERDICT_P2P = "p2p"  # a send nobody receives, or sizes that differ between the two ends


@dataclass(frozen=True)
class Outcome:
    kind: str
    severity: str  # before the judge grades it by how long the ranks have waited
    recipe: str


OUTCOMES: Mapping[str, Outcome] = {
    VERDICT_BEHIND: Outcome(KIND_OUTLIER, SEVERITY_ERROR, "rank-outside-collective"),
    VERDICT_MISMATCH: Outcome(KIND_MISMATCH, SEVERITY_ERROR, "mismatched-collectives"),
    VERDICT_HANG: Outcome(KIND_HANG, SEVERITY_ERROR, "collective-hang"),
    VERDICT_P2P: Outcome(KIND_MISMATCH, SEVERITY_ERROR, "broken-p2p"),
}


def ledger_finding(
    verdict: str,
    ranks: Iterable[int],
    summary: str,
    *,
    source: str,
    group: str | None = None,
    seq: int | None = None,
    op: str | None = None,
    waiting: Iterable[int] = (),
    waited: float | None = None,
    location: str | None = None,
    detail: str = "",
    severity: str | None = None,
    parts: Sequence[FindingPart] = (),
    facts: Sequence[tuple[str, str]] = (),
) -> Finding:
    """The finding of one ledger verdict (VERDICT_*), as `source` (model.SOURCE_*) saw it.
    `severity`: the source's own, where it knows better than the table (a mismatch in the
    past is a warning); else the table's."""
    outcome = OUTCOMES[verdict]
    return Finding(
        outcome.kind,
        tuple(sorted(set(ranks))),
        summary,
        location=location,
        recipe=outcome.recipe,
        detail=detail,
        severity=severity or outcome.severity,
        parts=tuple(parts),
        waiting=tuple(sorted(set(waiting))),
        waited=waited,
        collective=CollectiveRef(group, seq, rules.op_name(op) if op else None)
        if group is not None
        else None,
        sources=(source,),
        facts=tuple(facts),
    )


def members_of(group: str, called: Mapping[int, Iterable[str]]) -> set[int]:
    """The ranks of `group`, given the groups each rank called on (`called`: rank -> group
    names): every rank for the world's group, the listed ones for a `ranks:0-3,8` name (a
    member that never called on it included), else those that called on it."""
    if group == rules.DEFAULT_GROUP:
        return set(called)
    listed = rules.ranks_of_group(group)
    if listed is not None:
        return {rank for rank in called if rank in listed}
    return {rank for rank, groups in called.items() if group in set(groups)}
