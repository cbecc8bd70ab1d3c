"""Compiling is not hanging: a rank inside torch.compile is slow, not stuck.

With `torch.compile` a rank can compile for minutes (dynamo traces the bytecode, inductor
generates code and has the system C++ compiler build it, triton builds GPU kernels) while the
other ranks wait for it in their next collective. Its stack then looks stuck (its main thread
sleeps in `Future.result` while a pool builds, or in `subprocess.communicate`), and the
others wait for it: read as it looks, a hang.

A rank is *compiling* when its main thread's stack passes through one of torch's compile
entry points (`rankrules.COMPILE_FILES`: frames seen in py-spy dumps of real inductor
compiles), outside an import (`rankrules.compile_phase_in`). Running an already compiled
function passes through none of them (`eval_frame.py`, the generated module's `call` and
aot_autograd's runtime wrappers are not listed). A rank frozen inside a compile (its
heartbeat stopped: C code holds the GIL) stays frozen: a deadlock there is still a hang.
How long it has compiled comes from its agent, which samples its own main thread at each
heartbeat (`agent/compiles.py`); without an agent it is not known.

`explain_compiles` runs in the judge after the waits are graded: a finding whose culprits
all compile (a rank the others wait for, a rank that does not move) becomes one `compiling`
finding, info, that keeps who waits and for how long; ranks that compile and no finding
named get one too. Mismatches and crashes are left alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from mldebug.analysis.frames import is_user_frame
from mldebug.analysis.severity import SHORT_WAIT
from mldebug.analysis.timing import KIND_STRAGGLER
from mldebug.model import (
    KIND_COMPILING,
    KIND_OUTLIER,
    KIND_PROGRESSING,
    KIND_STUCK,
    SEVERITY_INFO,
    SEVERITY_WARNING,
    Finding,
    Frame,
    RankView,
    ThreadStack,
)
from mldebug.rankrules import compile_phase_in, compile_phase_of
from mldebug.wording import ranks_text, verb

# A compile this many times longer than the rank's longest before it (and a minute or more)
# is said: still info (a compile ends), but worth a look (a cache that stopped working).
FAR_LONGER = 5.0
FAR_LONGER_MIN = 60.0
# Findings that say a rank is somewhere the others wait for it, or does not move: a compile
# explains them. A mismatch, a crash or a missing rank it does not.
EXPLAINED_KINDS = frozenset({KIND_OUTLIER, KIND_STUCK, KIND_PROGRESSING})


@dataclass(frozen=True)
class Compile:
    """One rank seen compiling."""

    rank: int
    phase: str  # "torch._inductor (C++ build)"
    location: str | None  # the user's line that called into the compile (file:line)
    seconds: float | None  # how long so far, by its agent; None: not known
    longest_before: float = 0.0  # its longest compile before this one, by its agent


def compile_phase(frames: Sequence[Frame]) -> str | None:
    """What compiles on this stack (frames outermost first), or None: not compiling."""
    return compile_phase_in((f.file, f.function) for f in frames if not f.native)


def compile_caller(frames: Sequence[Frame]) -> Frame | None:
    """The innermost user frame before the compile begins: the line that called the compiled
    function (the generated modules inductor runs from its cache are not the user's)."""
    caller = None
    for frame in frames:
        if not frame.native and compile_phase_of(frame.file, frame.function) is not None:
            break
        if is_user_frame(frame):
            caller = frame
    return caller


def compile_seconds(view: RankView) -> float | None:
    """How long the rank has compiled, by its agent (state.json's `compile`), plus the
    state's age: the agent saw the compile begin at `since` on its own clock."""
    agent = view.agent
    if agent is None or agent.compile is None or agent.compile.since is None:
        return None
    return max(0.0, agent.time - agent.compile.since) + (view.heartbeat_age or 0.0)


def compiling_ranks(views: Sequence[RankView]) -> dict[int, Compile]:
    """rank -> how it compiles, for the live ranks whose main thread is in a compile."""
    found = {}
    # The ranks of a large job share a few stack objects (the node documents' reader reads
    # each stack once): each is walked once, kept alive here while its id is the key.
    phases: dict[int, tuple[Sequence[Frame], str | None, Frame | None]] = {}
    run_of: tuple[ThreadStack, ...] | None = None  # a run of ranks with one threads tuple
    phase: str | None = None
    caller: Frame | None = None
    for view in views:
        if view.threads is not run_of:  # looked up once a run (a node's ranks, mostly)
            run_of = view.threads
            phase = caller = None
            if run_of:
                frames = run_of[0].frames
                known = phases.get(id(frames))
                if known is None:
                    phase = compile_phase(frames)
                    known = (frames, phase, compile_caller(frames) if phase is not None else None)
                    phases[id(frames)] = known
                _, phase, caller = known
        if phase is None or view.gone:
            continue
        seen = view.agent.compile if view.agent is not None else None
        found[view.rank] = Compile(
            view.rank,
            phase,
            caller.location if caller else None,
            compile_seconds(view),
            seen.longest if seen is not None else 0.0,
        )
    return found


def _seconds(value: float) -> str:
    return f"{value:.1f} s" if value < 10 else f"{value:.0f} s"


def compiling_finding(compiles: Sequence[Compile], waited_for: Finding | None = None) -> Finding:
    """One finding for ranks that compile; `waited_for`: the finding it explains (who waits,
    in which collective, for how long)."""
    ranks = tuple(sorted(c.rank for c in compiles))
    phases = sorted({c.phase for c in compiles})
    known = [c.seconds for c in compiles if c.seconds is not None]
    longest = max(known) if known else None
    summary = (
        f"{ranks_text(ranks)} {verb(ranks, 'is', 'are')} compiling "
        f"({', '.join(phases)}"
        + (f", for {_seconds(longest)} so far" if longest is not None else "")
        + ")"
    )
    before = max(c.longest_before for c in compiles)
    if longest is not None and before > 0 and longest >= max(FAR_LONGER * before, FAR_LONGER_MIN):
        summary += f", far longer than its compiles before (the longest took {_seconds(before)})"
    waiting: tuple[int, ...] = ()
    if waited_for is not None:  # its waiting ranks, or its parts' (an outlier from stacks)
        named = set(waited_for.waiting) or {r for p in waited_for.parts for r in p.ranks}
        waiting = tuple(sorted(named - set(ranks)))
    if waiting:
        summary += f"; {ranks_text(waiting)} {verb(waiting, 'waits', 'wait')} for it"
    summary += ": slow, not hung"
    facts = [("compile phase", ", ".join(phases))]
    if longest is not None:
        facts.append(("compiling for", _seconds(longest)))
    if before > 0:
        facts.append(("longest compile before", _seconds(before)))
    location = next((c.location for c in compiles if c.location), None)
    return Finding(
        KIND_COMPILING,
        ranks,
        summary,
        location=location,
        severity=SEVERITY_INFO,
        recipe="compiling-rank",
        waiting=waiting,
        waited=waited_for.waited if waited_for is not None else None,
        collective=waited_for.collective if waited_for is not None else None,
        sources=waited_for.sources if waited_for is not None else (),
        facts=tuple(facts),
    )


def explain_compiles(findings: Sequence[Finding], compiles: Mapping[int, Compile]) -> list[Finding]:
    """The findings with the ones a compile explains made `compiling` (info), and a
    `compiling` finding for compiling ranks that no finding named."""
    if not compiles:
        return list(findings)
    out: list[Finding] = []
    told: set[int] = set()
    for finding in findings:
        culprits = set(finding.ranks)
        if (
            finding.kind in EXPLAINED_KINDS
            and culprits
            and culprits <= compiles.keys()
            and not culprits <= told
        ):
            out.append(compiling_finding([compiles[r] for r in sorted(culprits)], finding))
            told |= culprits
            continue
        if finding.kind in EXPLAINED_KINDS and culprits and culprits <= told:
            continue  # said already by a compiling finding
        out.append(finding)
    rest = [compiles[r] for r in sorted(compiles.keys() - told)]
    if rest:
        out.append(compiling_finding(rest))
    return out


def compiled_since(views: Sequence[RankView]) -> dict[int, float]:
    """rank -> at most how long ago its last compile ended, for live ranks not compiling by
    their stack whose agent saw a compile: still under way in a state up to a heartbeat old
    (it ended after that state), or ended at `ended` (agent's clock, plus the state's age)."""
    found = {}
    for view in views:
        seen = view.agent.compile if view.agent is not None and not view.gone else None
        if seen is None or view.agent is None:
            continue
        if view.threads and compile_phase(view.threads[0].frames) is not None:
            continue  # compiling now: compiling_ranks says so
        age = view.heartbeat_age or 0.0
        if seen.since is not None:
            found[view.rank] = age
        elif seen.ended is not None:
            found[view.rank] = max(0.0, view.agent.time - seen.ended) + age
    return found


def regrade_after_compiles(
    findings: Sequence[Finding], ended: Mapping[int, float], error_after: float
) -> list[Finding]:
    """A rank the others waited for all through its compile, caught just after it: their
    wait counts from the compile's end (seen on a real job: the watchdog looked a moment after
    a 5-minute compile, while rank 0's wait read 299 s)."""
    out = []
    for finding in findings:
        culprits = set(finding.ranks)
        if (
            finding.kind not in EXPLAINED_KINDS
            or finding.severity == SEVERITY_INFO
            or not culprits
            or not culprits <= ended.keys()
        ):
            out.append(finding)
            continue
        since = max(ended[r] for r in culprits)
        if since >= error_after:
            out.append(finding)  # long enough after its compile: the finding stands
            continue
        severity = SEVERITY_INFO if since < min(SHORT_WAIT, error_after) else SEVERITY_WARNING
        clause = (
            f"{ranks_text(sorted(culprits))} finished compiling {_seconds(since)} ago: "
            "the wait counts from then"
        )
        out.append(replace(finding, severity=severity, since=clause))
    return out


def compile_counts(views: Sequence[RankView]) -> dict[int, tuple[int, float]]:
    """rank -> (compiles its agent saw, seconds they took), for the live ranks with an
    agent (a rank whose agent saw none: (0, 0.0))."""
    counts = {}
    for view in views:
        if view.agent is None or view.gone:
            continue
        seen = view.agent.compile
        counts[view.rank] = (0, 0.0) if seen is None else (seen.count, seen.seconds)
    return counts


def name_recompiles(findings: Sequence[Finding], views: Sequence[RankView]) -> list[Finding]:
    """Straggler findings whose ranks compiled more often than every other rank say so."""
    counts = compile_counts(views)
    out = []
    for finding in findings:
        mine = [counts[r] for r in finding.ranks if r in counts]
        others = [c for r, c in counts.items() if r not in finding.ranks]
        if (
            finding.kind != KIND_STRAGGLER
            or not others
            or len(mine) != len(finding.ranks)
            or min(n for n, _ in mine) <= max(n for n, _ in others)
        ):
            out.append(finding)
            continue
        most, most_others = max(n for n, _ in mine), max(n for n, _ in others)
        seconds = max(s for _, s in mine)
        words = (
            f"; {ranks_text(finding.ranks)} compiled {most} times ({_seconds(seconds)} in all), "
            f"the others at most {most_others}: recompiles"
        )
        facts = (*finding.facts, ("compiles", f"{most} (the others at most {most_others})"))
        out.append(replace(finding, then=finding.then + words, facts=facts))
    return out
