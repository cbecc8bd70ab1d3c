"""The one judge: every source's evidence of one look in, the verdict out, once.

A look gathers evidence from many sources: the ranks' stacks (py-spy, or the rank's own),
their agents' ledger and state, torch's Flight Recorder dumps, the NCCL watchdog's lines,
NCCL RAS, gdb's native threads, sampling, timing and memory, from one node or from many.
The stack and agent analyses run here (`find_problems`); the other sources' readers hand
in the findings they made of their own evidence (`Evidence.found`). Then, once:

  1. what a direct measurement replaces goes (`Evidence.replaces`: `dump --profile`'s
     sampled straggler verdict replaces the agent's);
  2. findings that say the same thing are merged by their fields, never their words: the
     same kind about the same culprits (and, where both name one, the same collective)
     is one finding, seen by several sources;
  3. each wait is graded by how long the waiting ranks have waited (analysis/severity.py);
  4. what a compile explains is said as such (analysis/compiling.py): a rank the others
     wait for, or one that does not move, inside torch.compile is compiling (info); a
     straggler that compiled more often than every other rank is said to recompile; a
     wait for a rank that has just finished compiling counts from the compile's end;
  5. the findings are ordered: errors first, then by kind (a crash, then what the ranks
     wait for, then what is merely slow); findings read from text (explain's, which carry
     how sure their reader is) most sure first.

Local `dump`, several nodes, `attach`, the hang watchdog, `nccl` and `explain` all end in
`judge`; nothing is added to its verdict afterwards.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from mldebug.analysis.compiling import (
    compiled_since,
    compiling_ranks,
    explain_compiles,
    name_recompiles,
    regrade_after_compiles,
)
from mldebug.analysis.findings import find_problems, sort_findings
from mldebug.analysis.sequence import SequenceVerdict
from mldebug.analysis.severity import ERROR_AFTER, grade
from mldebug.analysis.timing import TimingVerdict
from mldebug.analysis.timing_comm import with_transport_fault
from mldebug.model import (
    SEVERITY_ERROR,
    SEVERITY_INFO,
    SEVERITY_WARNING,
    Finding,
    RankCrash,
    RankEvent,
    RankView,
)

_WORSE = {SEVERITY_ERROR: 0, SEVERITY_WARNING: 1, SEVERITY_INFO: 2}


@dataclass(frozen=True)
class Evidence:
    """What one look saw. `views`: the ranks as read (stacks, agent state); `failures`:
    rank -> why its stack could not be read; `crashes`: how ranks ended badly, earliest
    first; `sequence`: the agents' ledger verdict when the caller computed it; `events`:
    what the agents wrote (the first NaN); `timing`: analysis.timing's verdict when the
    caller computed it (the costliest analysis of a large job: once); `found`: findings other sources' readers made
    (logs, Flight Recorder dumps, RAS, gdb, sampling, nodes that did not answer);
    `replaces`: kinds of the analyses here that a direct measurement among `found`
    replaces; `error_after`: the wait that makes a hang (a run's --hang-timeout)."""

    views: Sequence[RankView] = ()
    world_size: int | None = None
    failures: Mapping[int, str] = field(default_factory=dict)
    crashes: Sequence[RankCrash] = ()
    sequence: SequenceVerdict | None = None
    events: Sequence[RankEvent] = ()
    timing: TimingVerdict | None = None
    found: Sequence[Finding] = ()
    replaces: frozenset[str] = frozenset()
    error_after: float = ERROR_AFTER


def judge(evidence: Evidence) -> tuple[Finding, ...]:
    """The verdict of one look: graded, merged and ordered findings, worst first."""
    made: list[Finding] = []
    if evidence.views or evidence.world_size:
        made = list(
            find_problems(
                evidence.views,
                evidence.world_size,
                dict(evidence.failures),
                evidence.crashes,
                sequence=evidence.sequence,
                events=evidence.events,
                timing=evidence.timing,
            )
        )
    made = [f for f in made if f.kind not in evidence.replaces] + list(evidence.found)
    made = with_transport_fault(made)  # comm_bound is a warning with the NCCL log's sockets
    views, error_after = evidence.views, evidence.error_after
    # Waits, idle time and compile counts are the agents' word: their ranks, picked once.
    agents = [v for v in views if v.agent is not None]
    graded = grade(merge_same(made), agents, error_after)
    told = regrade_after_compiles(
        name_recompiles(graded, agents), compiled_since(agents), error_after
    )
    told = explain_compiles(told, compiling_ranks(views))
    return sort_findings(told)


def _same(a: Finding, b: Finding) -> bool:
    """Do two findings say the same thing? The same kind about the same culprits with the
    same recipe, and the same collective where both name one on the same group."""
    if a.kind != b.kind or a.ranks != b.ranks or not a.ranks or a.recipe != b.recipe:
        return False
    one, other = a.collective, b.collective
    if one is None or other is None or one.group != other.group:
        return True
    return one.seq is None or other.seq is None or one.seq == other.seq


def merge_same(findings: Sequence[Finding]) -> list[Finding]:
    """One finding per thing found: the first one's words (the analyses here come before
    the other sources', which are made from older or coarser evidence), the worst severity,
    every source, every waiting rank and the longest wait any of them knows."""
    kept: list[Finding] = []
    for finding in findings:
        index = next((i for i, k in enumerate(kept) if _same(k, finding)), None)
        if index is None:
            kept.append(finding)
            continue
        first = kept[index]
        worse = min(first.severity, finding.severity, key=lambda s: _WORSE.get(s, 3))
        waits = [w for w in (first.waited, finding.waited) if w is not None]
        kept[index] = replace(
            first,
            severity=worse,
            sources=tuple(dict.fromkeys(first.sources + finding.sources)),
            waiting=tuple(sorted(set(first.waiting) | set(finding.waiting))),
            waited=max(waits) if waits else None,
            location=first.location or finding.location,
            recipe=first.recipe or finding.recipe,
            collective=first.collective or finding.collective,
            confidence=max(first.confidence or 0.0, finding.confidence or 0.0)
            if first.confidence is not None or finding.confidence is not None
            else None,
        )
    return kept
