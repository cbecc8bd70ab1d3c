"""All findings for one snapshot: every analysis registers here, and the verdict comes
out errors first.

Each analysis is a pure function over what the snapshot holds; `find_problems` calls them
in one list, so a new one is one line in it. The agents' collective counts go first
(`sequence.py`): the stack reasoning (`stacks.py`) judges the ranks they do not account for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from mldebug import model
from mldebug.analysis.memory import memory_findings
from mldebug.analysis.nonfinite import nonfinite_findings
from mldebug.analysis.sequence import SequenceVerdict, sequence_verdict
from mldebug.analysis.stacks import stack_findings
from mldebug.analysis.timing import TimingVerdict, judge_timing
from mldebug.model import (
    SOURCE_AGENT,
    SOURCE_MEMORY,
    SOURCE_STACKS,
    SOURCE_TIMING,
    Finding,
    RankCrash,
    RankEvent,
    RankView,
)

_SEVERITY_ORDER = {model.SEVERITY_ERROR: 0, model.SEVERITY_WARNING: 1, model.SEVERITY_INFO: 2}
# Within a severity: a crash, then what the ranks wait for, then what is merely slow.
_KIND_ORDER = (
    model.KIND_CRASH,
    model.KIND_NODE_NOT_READY,
    model.KIND_POD_NOT_RUNNING,
    model.KIND_NONFINITE,
    model.KIND_MISSING,
    model.KIND_FROZEN,
    model.KIND_OUTLIER,
    model.KIND_COMPILING,  # what an outlier or a stuck rank is when it compiles
    model.KIND_SLOW_DEVICE,
    model.KIND_SLOW_LINK,
    model.KIND_MISMATCH,
    model.KIND_RENDEZVOUS,
    model.KIND_HANG,
    model.KIND_UNREADABLE,
    model.KIND_STUCK,
    model.KIND_THREADS,
    model.KIND_MEMORY_GROWTH,
    model.KIND_MEMORY_OUTLIER,
    model.KIND_PROGRESSING,
    model.KIND_ENDED,
    model.KIND_CHECK_OK,
)


def find_problems(
    views: Sequence[RankView],
    world_size: int | None = None,
    failures: dict[int, str] | None = None,
    crashes: Sequence[RankCrash] = (),
    sequence: SequenceVerdict | None = None,
    events: Sequence[RankEvent] = (),
    timing: TimingVerdict | None = None,
) -> tuple[Finding, ...]:
    """All findings for one snapshot, errors first. `failures`: rank -> FAIL_* of its sample;
    `crashes`: how ranks ended badly, earliest first (from the run directory); `sequence`:
    what the agents' collective counts say (analysis.sequence), computed when not given;
    `events`: what the agents wrote in events.jsonl (the origin of a NaN/Inf); `timing`:
    analysis.timing's verdict, computed when not given (a caller that shows the table too
    passes the one it made: it is the costliest analysis of a large job)."""
    sequence = sequence if sequence is not None else sequence_verdict(views)
    findings = _seen_by(
        SOURCE_STACKS, stack_findings(views, world_size, failures or {}, crashes, sequence)
    )
    findings += _seen_by(SOURCE_AGENT, nonfinite_findings(events))
    findings += _seen_by(SOURCE_MEMORY, memory_findings(views))
    timing = timing if timing is not None else judge_timing(views)
    findings += _seen_by(
        SOURCE_TIMING, timing.findings
    )  # slow jobs: straggler, input/comm-bound, host syncs
    return sort_findings(findings)


def _seen_by(source: str, findings: Sequence[Finding]) -> list[Finding]:
    """The findings, each saying what saw it (its own word where it has one: the agents'
    ledger findings come through the stack reasoning)."""
    return [f if f.sources else replace(f, sources=(source,)) for f in findings]


def sort_findings(findings: list[Finding]) -> tuple[Finding, ...]:
    """Errors first; within a severity, the kinds in _KIND_ORDER's order (a crash, then
    what the ranks wait for, then what is merely slow). Findings read from text carry how
    sure their reader is (`confidence`, explain's): a verdict of those is most sure first,
    then errors first."""
    if findings and all(f.confidence is not None for f in findings):
        return tuple(
            sorted(
                findings,
                key=lambda f: (-(f.confidence or 0.0), _SEVERITY_ORDER.get(f.severity, 3)),
            )
        )
    findings = sorted(
        findings,
        key=lambda f: (
            _SEVERITY_ORDER.get(f.severity, 3),
            _KIND_ORDER.index(f.kind) if f.kind in _KIND_ORDER else 99,
        ),
    )
    return tuple(findings)
