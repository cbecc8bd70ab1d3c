"""Severity that grows with time: a wait is graded by how long it has lasted.

One snapshot of a healthy job can look like a hang: rank 0 saves a checkpoint while the
others wait a second in a barrier; every rank is in a collective that is still in transit.
What tells a pause from a hang is how long the waiting ranks have waited, which their
agents know (the call they made and when, in state.json; torch's Flight Recorder entry when
the agent read one). This step runs after the findings are made and grades the ones that
say "someone waits" (outlier, hang; ranks that returned normally while the others wait: the
last to leave a final barrier) by that wait, and a rank that "does not move" (stuck) by how
long its agent has seen no step and no collective:

  * shorter than SHORT_WAIT: info at most, and the summary says how long ("... for 1.2 s so
    far: a pause that short is not a hang");
  * shorter than the hang threshold (`error_after`, ERROR_AFTER unless the run says its own
    `--hang-timeout`): a warning at most;
  * longer: the finding keeps its severity, and says the wait.

Ranks waiting in init_process_group beside a rank still busy on its way there (an outlier
with the FACT_STARTING fact), or in a collective beside a rank busy loading a module
(FACT_IMPORTING: torch._dynamo, first imported when an optimizer is built), wait for a rank
that works: info until STARTUP_WAIT (or the hang threshold, if longer), a warning after it,
never an error.

An outlier's wait is held to the pause bound less the seconds its ranks' main threads
waited for a CPU in their step under way (their agents' run-queue count, read again by the
dump): on a busy node a second's checkpoint sleep ends and the rank then waits its turn for
a CPU, while the others wait for it. The hang threshold is judged on the wait itself.

The words go in the finding's `since` (views put them after its summary); the wait itself in
its `waited`.

A waiting rank whose agent saw it wait in no collective yet (its state.json is up to a
heartbeat old) has waited at most since its last progress. A finding whose waiting ranks
have no agent (a job not started by `mldebug run`) keeps its severity: the samples' span (a second) proves nothing either way. Mismatches are left
alone: ranks in different collectives never meet, however short the wait so far.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from mldebug.model import (
    FACT_IMPORTING,
    FACT_STARTING,
    KIND_HANG,
    KIND_MISSING,
    KIND_OUTLIER,
    KIND_STUCK,
    SEVERITY_ERROR,
    SEVERITY_INFO,
    SEVERITY_WARNING,
    AgentState,
    Finding,
    RankView,
)
from mldebug.wording import ranks_text

# The seconds of a wait the ranks waited for spent waiting for a CPU, where that made it a pause
FACT_CPU_WAIT = "cpu_wait_s"
SHORT_WAIT = 5.0  # seconds: below this a wait is a pause (checkpoint, a slow batch), info
# seconds: ranks reach init_process_group far apart in a healthy job (torch imported on a
# busy node, a dataset prepared on one rank first) and torch's store waits for them 10 to 30
# minutes; waiting ranks beside a rank still busy on its way there are info for this long.
STARTUP_WAIT = 60.0
ERROR_AFTER = 10.0  # seconds: a wait this long is a hang (the run's --hang-timeout may say)
GRADED_KINDS = frozenset({KIND_OUTLIER, KIND_HANG})
_RANK = {SEVERITY_ERROR: 0, SEVERITY_WARNING: 1, SEVERITY_INFO: 2}


def agent_wait(agent: AgentState) -> float | None:
    """How long the rank has waited in a collective it made and that has not completed, by
    its agent's own clock (None: it waits in none, as far as its agent knows)."""
    longest = None
    for group in agent.groups:
        made, done = group.enqueued, group.completed
        if made is None or made.enqueued is None:
            continue
        if done is not None and done.seq >= made.seq:
            continue
        seconds = max(0.0, agent.time - made.enqueued)
        longest = seconds if longest is None else max(longest, seconds)
    for flight in agent.flight:
        if flight.retired or flight.created is None:
            continue
        seconds = max(0.0, agent.time - flight.created)
        longest = seconds if longest is None else max(longest, seconds)
    return longest


def agent_idle(agent: AgentState) -> float | None:
    """How long the rank has made no progress (no step, no collective made or completed;
    one that has made none yet: since its agent started), by its agent's own clock (None:
    its agent says neither)."""
    moments = [agent.step_time]
    for group in agent.groups:
        for call in (group.enqueued, group.completed):
            if call is not None:
                moments += [call.enqueued, call.completed]
    known = [m for m in moments if m is not None]
    last = max(known) if known else agent.started
    return max(0.0, agent.time - last) if last is not None else None


def _by_rank(
    views: Sequence[RankView], measure: Callable[[AgentState], float | None]
) -> dict[int, float]:
    """rank -> `measure` of its agent's state, for the live ranks whose agent says."""
    found = {}
    for view in views:
        if view.agent is None or view.gone:
            continue
        seconds = measure(view.agent)
        if seconds is not None:
            found[view.rank] = seconds
    return found


def idle_of(views: Sequence[RankView]) -> dict[int, float]:
    """rank -> seconds since its last progress."""
    return _by_rank(views, agent_idle)


def waits_of(views: Sequence[RankView]) -> dict[int, float]:
    """rank -> seconds it has waited in a collective."""
    return _by_rank(views, agent_wait)


def waits_begun_since(views: Sequence[RankView]) -> dict[int, float]:
    """rank -> the longest it can have waited, for the live ranks whose agent saw them wait
    in no collective: a wait their stack shows began after their last progress (a state.json
    is up to a heartbeat old), so it is at most the time since then, on the agent's clock
    plus the state's age. A rank blocked for long has made no progress for as long."""
    found = {}
    for view in views:
        if view.agent is None or view.gone or agent_wait(view.agent) is not None:
            continue
        idle = agent_idle(view.agent)
        if idle is not None:
            found[view.rank] = idle + (view.heartbeat_age or 0.0)
    return found


def cpu_waits_of(views: Sequence[RankView]) -> dict[int, float]:
    """rank -> seconds its main thread has waited for a CPU in its step under way."""
    found = {}
    for view in views:
        if view.agent is not None and not view.gone:
            seconds = view.agent.step_waited_for_cpu
            if seconds is not None:
                found[view.rank] = seconds
    return found


def _held_back(finding: Finding, cpu_waits: Mapping[int, float], waited: float) -> float:
    """Seconds of the others' wait that the ranks they wait for spent waiting for a CPU (a
    busy node held their step back), at most the wait: an outlier's own ranks only."""
    if finding.kind != KIND_OUTLIER:
        return 0.0
    held = [cpu_waits[r] for r in finding.ranks if r in cpu_waits]
    return min(max(held), waited) if held else 0.0


def _graded(finding: Finding) -> bool:
    """A wait the finding says: a hang, an outlier, ranks waiting for others on their way
    through start-up, or ranks that returned normally (exit code 0, or their Python shut
    down normally) while others wait (they may have left the others' last collective just
    before them: a job's final barrier)."""
    names = {name for name, _ in finding.facts}
    return (
        finding.kind in GRADED_KINDS
        or FACT_STARTING in names
        or (finding.kind == KIND_MISSING and "ended" in names)
    )


def _waiting_ranks(
    finding: Finding, waits: Mapping[int, float], since: Mapping[int, float]
) -> list[int]:
    """The ranks the finding says wait and whose wait is known or bounded: a hang's own
    ranks; the live ranks beside ranks that ended; an outlier's other parts (else the ranks
    whose agents say they wait)."""
    if finding.kind == KIND_HANG:
        return [r for r in finding.ranks if r in waits or r in since]
    if finding.kind == KIND_MISSING:
        return sorted((set(waits) | set(since)) - set(finding.ranks))
    culprits = set(finding.ranks)
    named = {r for part in finding.parts for r in part.ranks} - culprits
    if not named:
        return sorted(set(waits) - culprits)
    return sorted(r for r in named if r in waits or r in since)


def _seconds(value: float) -> str:
    return f"{value:.1f} s" if value < 10 else f"{value:.0f} s"


def grade_stuck(finding: Finding, idle: Mapping[int, float], error_after: float) -> Finding:
    """A rank seen still in one sample (a checkpoint's sleep, a slow save) that made
    progress a moment ago is pausing, not stuck."""
    if finding.kind != KIND_STUCK or finding.severity == SEVERITY_INFO:
        return finding
    if not finding.ranks or any(r not in idle for r in finding.ranks):
        return finding  # a rank no agent speaks for: the stacks decide
    still = max(idle[r] for r in finding.ranks)
    if still >= min(SHORT_WAIT, error_after):
        return finding
    clause = f"for {_seconds(still)} so far: a pause that short is not a hang"
    return replace(finding, severity=SEVERITY_INFO, since=clause)


def grade_finding(
    finding: Finding,
    waits: Mapping[int, float],
    error_after: float,
    since: Mapping[int, float] | None = None,
    cpu_waits: Mapping[int, float] | None = None,
) -> Finding:
    """`waits`: rank -> how long it has waited (waits_of); `since`: rank -> the most it can
    have waited, for ranks whose agent saw no wait yet (waits_begun_since); `cpu_waits`:
    rank -> its main thread's wait for a CPU in its step under way (cpu_waits_of)."""
    if not _graded(finding) or finding.severity == SEVERITY_INFO:
        return finding
    since = since or {}
    ranks = _waiting_ranks(finding, waits, since)
    if not ranks:
        return finding  # no agent says how long: the finding stands as the stacks made it
    waited = max(waits[r] if r in waits else since[r] for r in ranks)
    if any(name in (FACT_STARTING, FACT_IMPORTING) for name, _ in finding.facts):
        return _graded_start_up(finding, waited, error_after)
    if waited >= error_after:
        return replace(
            finding, waited=waited, since=f"the waiting ranks have waited {_seconds(waited)}"
        )
    held = _held_back(finding, cpu_waits or {}, waited)
    facts = finding.facts
    if waited < min(SHORT_WAIT, error_after):
        severity = SEVERITY_INFO
        clause = f"for {_seconds(waited)} so far: a pause that short is not a hang"
    elif waited - held < min(SHORT_WAIT, error_after):
        severity = SEVERITY_INFO
        clause = (
            f"for {_seconds(waited)} so far, {_seconds(held)} of it {ranks_text(finding.ranks)}"
            " waiting for a CPU (a busy node): a pause that short is not a hang"
        )
        facts = (*facts, (FACT_CPU_WAIT, f"{held:.1f}"))  # what made it a pause
    else:
        severity = SEVERITY_WARNING
        clause = f"for {_seconds(waited)} so far (a hang once it passes {_seconds(error_after)})"
    if _RANK[severity] < _RANK.get(finding.severity, 0):
        severity = finding.severity  # grading only ever lowers
    return replace(finding, severity=severity, waited=waited, since=clause, facts=facts)


def _graded_start_up(finding: Finding, waited: float, error_after: float) -> Finding:
    """Ranks still busy on their way to the rendezvous, or loading a module: info while the
    others' wait is within the start-up allowance, a warning after it (they work; they are
    not hung)."""
    loading = any(name == FACT_IMPORTING for name, _ in finding.facts)
    if waited >= max(STARTUP_WAIT, error_after):
        what = "load" if loading else "start"
        clause = f"the waiting ranks have waited {_seconds(waited)} for it to {what}"
        return replace(finding, waited=waited, since=clause)
    working = "a rank busy importing is" if loading else "ranks still starting up are"
    clause = f"for {_seconds(waited)} so far: {working} not a hang"
    return replace(finding, severity=SEVERITY_INFO, waited=waited, since=clause)


def grade(
    findings: Sequence[Finding], views: Sequence[RankView], error_after: float = ERROR_AFTER
) -> tuple[Finding, ...]:
    """The findings, the waits among them graded by how long they have lasted, in the
    order they came (errors first: a graded one moves after the others of its severity)."""
    waits, idle, since = waits_of(views), idle_of(views), waits_begun_since(views)
    if not waits and not idle:
        return tuple(findings)
    cpu_waits = cpu_waits_of(views)
    graded = [
        grade_stuck(grade_finding(f, waits, error_after, since, cpu_waits), idle, error_after)
        for f in findings
    ]
    order = {id(f): i for i, f in enumerate(graded)}
    return tuple(sorted(graded, key=lambda f: (_RANK.get(f.severity, 3), order[id(f)])))
