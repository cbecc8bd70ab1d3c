"""The stack verdict: findings from what each rank is doing (pure functions over RankViews).

The reasoning is the one a person does over N walls of frames: ranks that wait in a
collective wait for someone; whoever is elsewhere is the one they wait for (outlier); ranks
waiting in different collectives, or in one op from different lines, will never meet
(mismatch); ranks of the world size that are not there cannot arrive (missing). Only ranks
that are stuck count as waiting, so a healthy job sampled mid-collective is not called hung.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import replace
from itertools import chain
from operator import attrgetter
from typing import NamedTuple

from mldebug.analysis.frames import (
    STARTING_PYTHON,
    busy_importing,
    busy_starting_python,
    is_rendezvous,
)
from mldebug.analysis.sequence import SequenceVerdict, frozen_findings
from mldebug.analysis.threads import ThreadDifference, explaining, thread_differences
from mldebug.model import (
    FACT_IMPORTING,
    FACT_STARTING,
    FAIL_PERMISSION,
    FAIL_TIMEOUT,
    GONE_STATES,
    KIND_CRASH,
    KIND_ENDED,
    KIND_HANG,
    KIND_MISMATCH,
    KIND_MISSING,
    KIND_OUTLIER,
    KIND_PROGRESSING,
    KIND_RENDEZVOUS,
    KIND_STUCK,
    KIND_THREADS,
    KIND_UNREADABLE,
    SEVERITY_ERROR,
    SEVERITY_INFO,
    SEVERITY_WARNING,
    STATE_RUNNING,
    STATE_STUCK,
    STATE_UNREADABLE,
    STATE_WAITING,
    Finding,
    FindingPart,
    RankCrash,
    RankView,
)
from mldebug.ranges import format_ranks
from mldebug.rankrules import frame_label
from mldebug.wording import ranks_text, verb

MAX_THREAD_FINDINGS = 3
_RANK = attrgetter("rank")
_NONE = object()  # no rank's user frame


def location_of(view: RankView) -> str | None:
    return view.user_frame.location if view.user_frame is not None else None


def _where(view: RankView) -> str:
    return frame_label(view.user_frame) if view.user_frame else "library code only"


def _worker_text(group: Sequence[RankView], stuck: bool) -> str | None:
    """What ranks that wait for their DataLoader wait on: a worker in user code, by pid."""
    pids = [v.dataloader_worker for v in group if v.dataloader_worker is not None]
    if not pids:
        return None
    how = "stuck in" if stuck else "in"
    if len(group) == 1:
        return (
            f"it waits for its DataLoader, whose worker (pid {pids[0]}) is {how} {_where(group[0])}"
        )
    shown = ", ".join(map(str, pids[:3])) + (", ..." if len(pids) > 3 else "")
    return (
        f"they wait for their DataLoaders, whose workers (pids {shown}) are {how} "
        f"{_where(group[0])}"
    )


def _worker_detail(group: Sequence[RankView]) -> str:
    if all(v.dataloader_worker is None for v in group):
        return ""
    ranks = [v.rank for v in group]
    return (
        f"The main thread of {ranks_text(ranks)} waits in torch/utils/data/dataloader.py for "
        "a batch; the line is the worker process's. Its stack is shown with the rank's "
        f"threads: mldebug dump --ranks {format_ranks(ranks)}"
    )


def _place(view: RankView) -> tuple[str | None, bool]:
    """Bucket key: a rank's line, and whether that line is a DataLoader worker's."""
    return location_of(view), view.dataloader_worker is not None


def _bucket(views: Sequence[RankView], key: Callable[[RankView], Hashable]) -> list[list[RankView]]:
    """Views grouped by key (made of the rank's line, collective and DataLoader worker),
    biggest group first, then by lowest rank. The ranks of a large job share a few frame
    objects: they are put together by those first, and each set's key is made once."""
    alike: dict = {}
    # A run of ranks with the same line, collective and worker (a node's, mostly) looks
    # its set up once.
    frame: object = _NONE
    collective: str | None = None
    worker = False
    members: list[RankView] = []
    for view in views:
        if (
            view.user_frame is not frame
            or view.collective is not collective
            or (view.dataloader_worker is not None) != worker
        ):
            frame, collective = view.user_frame, view.collective
            worker = view.dataloader_worker is not None
            members = alike.setdefault((id(frame), collective, worker), [])
        members.append(view)
    keyed: dict = {}
    for members in alike.values():
        keyed.setdefault(key(members[0]), []).append(members)
    buckets = []
    for sets in keyed.values():
        if len(sets) == 1:
            buckets.append(sets[0])
        else:  # equal keys from different objects: the ranks in their first order
            chosen = {id(v) for members in sets for v in members}
            buckets.append([v for v in views if id(v) in chosen])
    return sorted(buckets, key=lambda b: (-len(b), min(map(_RANK, b))))


def _missing(
    views: Sequence[RankView], gone: Sequence[RankView], world: int | None, alive: bool
) -> list[Finding]:
    if not gone:
        return []
    if not alive and all(map(_ended_well, gone)):
        # Every rank returned normally: a job that is over, not one that lost ranks.
        how = (
            "exited with code 0"
            if all(v.exit_code == 0 for v in gone)
            else "returned normally (exit code 0 or their Python shut down normally)"
        )
        return [
            Finding(
                KIND_ENDED,
                tuple(v.rank for v in gone),
                f"all {len(gone)} ranks {how}: the job has ended",
                severity=SEVERITY_INFO,
            )
        ]
    ranks = [v.rank for v in gone]
    if alive and all(map(_ended_well, gone)) and not _wait_on_others(views):
        # A job's ranks end one by one: the first to return is not lost while the others
        # still work (it is once they wait in a collective for it, below).
        running = [v.rank for v in views if not v.gone]
        how = "exit code 0" if all(v.exit_code == 0 for v in gone) else "Python shut down"
        return [
            Finding(
                KIND_MISSING,
                tuple(ranks),
                f"{ranks_text(ranks)} {verb(ranks, 'has', 'have')} finished ({how}) "
                f"while {ranks_text(running)} still {verb(running, 'runs', 'run')}, in no "
                "collective: ranks that end one by one",
                recipe="missing-ranks",
                severity=SEVERITY_INFO,
            )
        ]
    codes = [
        f"rank {v.rank} exited with code {v.exit_code}"
        if v.exit_code is not None
        else f"rank {v.rank}'s Python shut down normally"
        for v in gone
        if v.exit_code is not None or v.shut_down
    ]
    of = f" of {world}" if world else ""
    summary = f"{ranks_text(ranks)}{of} {verb(ranks, 'is', 'are')} not running"
    summary += (
        f" ({'; '.join(codes[:3])}{'; ...' if len(codes) > 3 else ''})"
        if codes
        else ": never found, or exited"
    )
    if alive:
        summary += "; the other ranks cannot complete a collective without " + verb(
            ranks, "it", "them"
        )
    # Ranks that returned normally while others wait may have left the last collective just
    # before them (a final barrier): analysis/severity grades it by how long they have waited.
    ended: tuple[tuple[str, str], ...] = ()
    if alive and all(v.exit_code == 0 for v in gone):
        ended = (("ended", "exit code 0"),)
    elif alive and all(map(_ended_well, gone)):
        ended = (("ended", "Python shut down normally"),)
    return [Finding(KIND_MISSING, tuple(ranks), summary, recipe="missing-ranks", facts=ended)]


def _ended_well(view: RankView) -> bool:
    """It returned normally: exit code 0, or its Python shut down normally and no code is
    recorded yet (its launcher has not reaped it: a native teardown can take seconds)."""
    return view.exit_code == 0 or (view.exit_code is None and view.shut_down)


def _wait_on_others(views: Sequence[RankView]) -> bool:
    """Some rank still running is inside a collective (not its teardown), or its agent says
    it waits in one."""
    return any(
        not v.gone
        and (
            v.state == STATE_WAITING
            or (
                v.collective not in (None, "destroy_process_group")
                and not is_rendezvous(v.collective)
            )
        )
        for v in views
    )


def _crash(gone: Sequence[RankView], crashes: Sequence[RankCrash]) -> list[Finding]:
    """The root cause: the first rank that ended badly (and is gone), with what it raised."""
    if not crashes:
        return []
    # A rank that exited 0 did not crash, even if it handed an exception to its excepthook.
    failed = {v.rank for v in gone if v.exit_code != 0}
    ended = [c for c in crashes if c.rank in failed]
    if not ended:
        return []
    first = ended[0]
    what = f"{first.exc_type}: {first.message}" if first.exc_type else (first.how or "it ended")
    summary = f"rank {first.rank} failed first: {what}"
    if first.location:
        summary += f" ({first.location})"
    later = [c.rank for c in ended[1:]]
    if later:
        summary += f"; {ranks_text(later)} failed after it"
    return [
        Finding(
            KIND_CRASH,
            (first.rank,),
            summary,
            location=first.location,
            recipe=first.recipe or "rank-crash",
            detail=first.how if first.exc_type and first.how else "",
        )
    ]


def _unreadable(
    views: Sequence[RankView], bad: Sequence[RankView], failures: dict[int, str]
) -> list[Finding]:
    if not bad:
        return []
    ranks = [v.rank for v in bad]
    permission = any(failures.get(v.rank) == FAIL_PERMISSION for v in bad)
    # A rank py-spy could not read in time is most often in the kernel (D state, hung I/O).
    timed_out = all(failures.get(v.rank) == FAIL_TIMEOUT for v in bad)
    summary = f"could not read the stack of {ranks_text(ranks)}: {bad[0].detail}"
    # With no rank read at all there is no verdict: that is an error, not a footnote.
    nothing_read = all(v.state == STATE_UNREADABLE for v in views if v.target is not None)
    return [
        Finding(
            KIND_UNREADABLE,
            tuple(ranks),
            summary,
            severity=SEVERITY_ERROR if nothing_read else SEVERITY_WARNING,
            recipe="ptrace-permission" if permission or not timed_out else "d-state-frozen-fs",
        )
    ]


def _waiting_label(view: RankView) -> tuple[str, str | None]:
    return view.collective or "?", location_of(view)


def _part(group: list[RankView], label: str, ranks: tuple[int, ...] | None = None) -> FindingPart:
    """The group's ranks (`ranks`: made already) with what they do, and where."""
    made = ranks if ranks is not None else tuple(v.rank for v in group)
    return FindingPart(made, label, location_of(group[0]))


class _Waiting(NamedTuple):
    """The groups of waiting ranks, each group's ranks, and all of them sorted: made once
    for every finding that names them."""

    groups: list[list[RankView]]
    ranks: list[tuple[int, ...]]
    all_ranks: list[int]


def _waiting(groups: list[list[RankView]]) -> _Waiting:
    ranks = [tuple(map(_RANK, g)) for g in groups]
    return _Waiting(groups, ranks, sorted(chain.from_iterable(ranks)))


def _parts(waiting: _Waiting) -> tuple[FindingPart, ...]:
    return tuple(
        _part(g, g[0].collective or "?", ranks)
        for g, ranks in zip(waiting.groups, waiting.ranks, strict=True)
    )


def _mismatch(waiting: _Waiting, severity: str) -> list[Finding]:
    groups = waiting.groups
    if len(groups) < 2:
        return []
    ops = {g[0].collective for g in groups}
    sides = [
        f"{ranks_text(waiting.ranks[i])} in {g[0].collective} at {_where(g[0])}"
        for i, g in enumerate(groups[:4])
    ]
    more = f" and {len(groups) - 4} more groups" if len(groups) > 4 else ""
    why = (
        "different collectives"
        if len(ops) > 1
        else f"{groups[0][0].collective} from different lines"
    )
    ranks = waiting.all_ranks
    culprit = groups[-1][0]  # the smallest group is the likeliest to have taken the wrong turn
    return [
        Finding(
            KIND_MISMATCH,
            tuple(ranks),
            f"ranks wait in {why}, which never match: {'; '.join(sides)}{more}",
            location=location_of(culprit),
            recipe="mismatched-collectives",
            severity=severity,
            parts=_parts(waiting),
        )
    ]


def _thread_clause(ranks: Sequence[int], difference: ThreadDifference | None) -> str:
    """'; rank 2 has no thread running prefetch (...), which ranks 0-1 have: ...'"""
    if difference is None:
        return ""
    return (
        f"; {ranks_text(ranks)} {verb(ranks, 'has', 'have')} no thread running "
        f"{difference.label}, which {ranks_text(difference.have)} "
        f"{verb(difference.have, 'has', 'have')}: it may have died"
    )


def _with_lost_thread(
    finding: Finding, threads: list[ThreadDifference], used: set[ThreadDifference]
) -> Finding:
    """An agent's outlier (ranks that never made a call the others wait in) with the thread
    its ranks lost, when they lost one: the reason they never got there."""
    if finding.kind != KIND_OUTLIER:
        return finding
    lacking = explaining(threads, finding.ranks)
    if lacking is None:
        return finding
    used.add(lacking)
    return replace(finding, then=finding.then + _thread_clause(finding.ranks, lacking))


def _starting_facts(op: str | None, loading: str | None) -> tuple[tuple[str, str], ...]:
    if loading is not None:
        return ((FACT_IMPORTING, loading),)
    return ((FACT_STARTING, op),) if op else ()


def _outliers(
    elsewhere: list[RankView],
    waiting: _Waiting,
    severity: str,
    threads: list[ThreadDifference],
    used: set[ThreadDifference],
) -> list[Finding]:
    main = waiting.groups[0]
    op = main[0].collective
    waiting_ranks = waiting.all_ranks
    they_wait = f"{ranks_text(waiting_ranks)} {verb(waiting_ranks, 'waits', 'wait')}"
    waiting_parts = _parts(waiting)
    findings = []
    for group in _bucket(elsewhere, key=_place):
        ranks = [v.rank for v in group]
        busy = group[0].state == STATE_RUNNING
        loading = busy_importing(group[0])
        python_starts = busy_starting_python(group[0])
        busy_text = (
            STARTING_PYTHON
            if python_starts
            else (f"busy importing {loading}" if loading else "busy")
        )
        doing = (
            _worker_text(group, stuck=not busy)
            or f"{verb(ranks, 'it is', 'they are')} {busy_text if busy else 'stuck'} in {_where(group[0])}"
        )
        lacking = explaining(threads, ranks)
        if lacking is not None:
            used.add(lacking)
        summary = (
            f"{ranks_text(ranks)} never reached {op}: {doing}, while "
            f"{they_wait} in {op} at {_where(main[0])}{_thread_clause(ranks, lacking)}"
        )
        # Ranks still working their way to init_process_group is how every job starts, and
        # a rank busy loading a module works: never an error, and graded by the start-up
        # allowance (analysis/severity).
        starting = busy and (is_rendezvous(op) or loading is not None or python_starts)
        group_severity = SEVERITY_WARNING if starting else severity
        parts = (
            _part(group, group[0].user_frame.function if group[0].user_frame else "?"),
            *waiting_parts,
        )
        findings.append(
            Finding(
                KIND_OUTLIER,
                tuple(ranks),
                summary,
                location=location_of(group[0]),
                recipe="rank-outside-collective",
                severity=group_severity,
                parts=parts,
                detail=_worker_detail(group),
                facts=_starting_facts(op, loading) if starting else (),
            )
        )
    return findings


def _busy_starting(busy: list[RankView], waiting: _Waiting) -> list[Finding]:
    """Ranks waiting in init_process_group (new_group, the store) while others still work
    inside it (connecting, building their transport, a module loaded on the way): a job
    starting up, graded by the start-up allowance (analysis/severity), never "all wait".
    Not an outlier: the busy ranks are inside the call the others wait in."""
    main = waiting.groups[0]
    op = main[0].collective
    ranks = [v.rank for v in busy]
    summary = (
        f"{ranks_text(ranks)} {verb(ranks, 'is', 'are')} still busy inside {busy[0].collective} "
        f"at {_where(busy[0])}, while {ranks_text(waiting.all_ranks)} "
        f"{verb(waiting.all_ranks, 'waits', 'wait')} in {op} at {_where(main[0])}: the job is "
        "starting up"
    )
    return [
        Finding(
            KIND_RENDEZVOUS,
            tuple(ranks),
            summary,
            location=location_of(busy[0]),
            recipe="rendezvous-hang",
            severity=SEVERITY_WARNING,
            parts=(_part(busy, busy[0].collective or "?"), *_parts(waiting)),
            facts=_starting_facts(op, busy_importing(busy[0])),
        )
    ]


def _all_waiting(
    group: list[RankView], missing: list[int], severity: str, unseen: Sequence[int] = ()
) -> list[Finding]:
    ranks = [v.rank for v in group]
    op = group[0].collective
    where = _where(group[0])
    if unseen and not missing:
        kind = KIND_RENDEZVOUS if is_rendezvous(op) else KIND_HANG
        return [
            Finding(
                kind,
                tuple(ranks),
                f"{ranks_text(ranks)} {verb(ranks, 'waits', 'wait')} in {op} at {where}; "
                f"{ranks_text(list(unseen))} could not be read, so whether "
                f"{verb(list(unseen), 'it is', 'they are')} elsewhere is not known",
                location=location_of(group[0]),
                recipe="rendezvous-hang" if kind == KIND_RENDEZVOUS else "collective-hang",
                severity=SEVERITY_WARNING if severity == SEVERITY_ERROR else severity,
            )
        ]
    if missing:
        kind = KIND_RENDEZVOUS if is_rendezvous(op) else KIND_HANG
        summary = (
            f"{ranks_text(ranks)} wait in {op} at {where} for {ranks_text(missing)}, "
            f"which {verb(missing, 'is', 'are')} not running"
        )
    elif is_rendezvous(op):
        kind = KIND_RENDEZVOUS
        summary = (
            f"all {len(ranks)} ranks wait in {op} at {where}: the rendezvous never "
            "completes (check MASTER_ADDR, MASTER_PORT and that every node started)"
        )
    else:
        kind = KIND_HANG
        summary = (
            f"all {len(ranks)} ranks wait in {op} at {where} and none is elsewhere: "
            "the collective itself does not complete"
        )
    recipe = "rendezvous-hang" if kind == KIND_RENDEZVOUS else "collective-hang"
    detail = _RENDEZVOUS_DETAIL if kind == KIND_RENDEZVOUS else _HANG_DETAIL
    return [
        Finding(
            kind,
            tuple(ranks),
            summary,
            location=location_of(group[0]),
            recipe=recipe,
            severity=severity,
            detail="" if missing else detail,
        )
    ]


_RENDEZVOUS_DETAIL = (
    "Every rank must reach init_process_group with the same MASTER_ADDR, MASTER_PORT and "
    "WORLD_SIZE; a rank on another node that never started, a firewall, or a wrong address "
    "keeps the others here."
)
_HANG_DETAIL = (
    "No rank is elsewhere, so the wait is below Python: another process group or rank not "
    "shown here, the network between ranks (GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME), or a "
    "device that stopped answering."
)


def _starting(working: list[RankView]) -> str:
    """'; ranks 0-1 are still starting Python (...), at WHERE' for the working ranks whose
    program has not begun (a slow .pth file or sitecustomize holds them), else ''."""
    starting = [v for v in working if busy_starting_python(v)]
    if not starting:
        return ""
    ranks = [v.rank for v in starting]
    return (
        f"; {ranks_text(ranks)} {verb(ranks, 'is', 'are')} {STARTING_PYTHON}, at "
        f"{_where(starting[0])}"
    )


def _idle(
    present: list[RankView],
    threads: list[ThreadDifference],
    used: set[ThreadDifference],
    quiet: bool = False,
    unread: Sequence[RankView] = (),
) -> list[Finding]:
    """Ranks in no collective: stuck ones, or (unless `quiet`: other ranks are accounted
    for otherwise) a job where everyone works, with the `unread` ranks whose agents say
    they work (the live view reads their stacks in turns)."""
    stuck = [v for v in present if v.state == STATE_STUCK]
    if not stuck:
        if present and not quiet and all(v.state == STATE_RUNNING for v in present):
            working = sorted(v.rank for v in [*present, *unread])
            return [
                Finding(
                    KIND_PROGRESSING,
                    tuple(working),
                    f"all {len(working)} ranks are working (their stacks move, they use "
                    f"CPU, or their agents see them move); nothing looks hung{_starting(present)}",
                    severity=SEVERITY_INFO,
                    recipe="stragglers",  # working but slow is what is left to look at
                )
            ]
        return []
    findings = []
    for group in _bucket(stuck, key=_place):
        ranks = [v.rank for v in group]
        lacking = explaining(threads, ranks)
        if lacking is not None:
            used.add(lacking)
        findings.append(
            Finding(
                KIND_STUCK,
                tuple(ranks),
                f"{ranks_text(ranks)} {verb(ranks, 'does', 'do')} not move and "
                f"{verb(ranks, 'is', 'are')} in no collective: "
                f"{_worker_text(group, stuck=True) or _where(group[0])}"
                f"{_thread_clause(ranks, lacking)}",
                location=location_of(group[0]),
                severity=SEVERITY_WARNING,
                detail=_worker_detail(group),
                recipe="stuck-rank",
            )
        )
    return findings


def _thread_findings(differences: list[ThreadDifference]) -> list[Finding]:
    """Threads that differ across ranks and no other finding has explained."""
    findings = []
    for difference in differences[:MAX_THREAD_FINDINGS]:
        have, lack = difference.have, difference.lack
        if difference.missing:
            summary = (
                f"{ranks_text(lack)} {verb(lack, 'has', 'have')} no thread running "
                f"{difference.label}, which {ranks_text(have)} {verb(have, 'has', 'have')}"
            )
        else:
            summary = (
                f"{ranks_text(have)} {verb(have, 'runs', 'run')} a thread {difference.label} "
                f"that {ranks_text(lack)} {verb(lack, 'does', 'do')} not"
            )
        findings.append(
            Finding(
                KIND_THREADS,
                difference.odd or lack,
                summary,
                recipe="missing-thread",
                # A thread the others have and these ranks lost is a likely cause; one only
                # some ranks run (a logger on rank 0) is usually by design.
                severity=SEVERITY_WARNING if difference.missing else SEVERITY_INFO,
            )
        )
    hidden = len(differences) - MAX_THREAD_FINDINGS
    if hidden > 0:
        findings[-1] = replace(
            findings[-1], detail=f"{hidden} more thread(s) differ between ranks: mldebug dump -v"
        )
    return findings


def stack_findings(
    views: Sequence[RankView],
    world_size: int | None,
    failures: dict[int, str],
    crashes: Sequence[RankCrash],
    sequence: SequenceVerdict,
) -> list[Finding]:
    """The verdict from what the ranks are doing: crashes, missing and unreadable ranks, the
    agents' findings (`sequence`, with the threads a rank lost), frozen ranks, then the
    stack reasoning over the ranks those do not account for. Unsorted."""
    # One pass sorts the ranks out (a pass over a large job's views is what costs here).
    gone: list[RankView] = []  # v.gone
    bad: list[RankView] = []  # not read
    # A rank not read yet (a live view reads large jobs a slice at a time) says nothing.
    readable: list[RankView] = []
    agents = False
    for view in views:
        state = view.state
        if state in GONE_STATES:
            gone.append(view)
        elif state == STATE_UNREADABLE:
            bad.append(view)
        elif view.threads:
            readable.append(view)
        agents = agents or view.agent is not None
    crash = _crash(gone, crashes)
    alive = len(gone) < len(views)
    # With every rank gone, "not running" says nothing the root cause does not.
    findings = (
        crash
        + (_missing(views, gone, world_size, alive) if alive or not crash else [])
        + _unreadable(views, bad, failures)
    )
    # The ranks' agents first: their count of collectives says who waits for whom whatever
    # the stacks show. The stacks judge the ranks these findings do not account for.
    frozen = frozen_findings(views) if agents else []
    missing = sorted(v.rank for v in gone)
    threads = thread_differences(readable)
    used: set[ThreadDifference] = set()
    findings += [_with_lost_thread(f, threads, used) for f in sequence.findings] + frozen
    covered = sequence.covered
    present = [v for v in readable if v.rank not in covered] if covered else readable
    # A rank working inside a collective is in transit: neither waiting for anyone nor
    # keeping anyone waiting (ranks arriving at init_process_group one after another).
    waiting: list[RankView] = []
    elsewhere: list[RankView] = []
    for view in present:
        if not view.collective:
            elsewhere.append(view)
        elif view.state != STATE_RUNNING:
            waiting.append(view)
    if not waiting:
        unread = [v for v in views if v.state == STATE_RUNNING and not v.threads and not v.gone]
        quiet = bool(sequence.covered or frozen)
        findings += _idle(present, threads, used, quiet=quiet, unread=unread)
    else:
        # Waiting ranks that were seen stuck (or that their agent says wait) make it an
        # error; one sample only, a warning.
        severity = (
            SEVERITY_ERROR
            if any(v.state in (STATE_STUCK, STATE_WAITING) for v in waiting)
            else SEVERITY_WARNING
        )
        groups = _bucket(waiting, key=_waiting_label)
        ranked = _waiting(groups)
        # Ranks whose agents count the same calls are no mismatch, whatever the stacks
        # caught: read a moment apart, one rank is in the next call while its peer ends the
        # last (the ledger compares calls by number, and names a real mismatch itself).
        if not all(v.rank in sequence.in_transit for v in waiting):
            findings += _mismatch(ranked, severity)
        if elsewhere:
            findings += _outliers(elsewhere, ranked, severity, threads, used)
        elif len(groups) == 1:
            # Ranks not read (py-spy failed or timed out, not sampled yet) may be where the
            # others wait for: "all wait" is not known, and no error.
            seen = {v.rank for v in present} | set(covered)
            unseen = [v.rank for v in views if v.rank not in seen and v.state not in GONE_STATES]
            busy_inside = [
                v for v in present if v.state == STATE_RUNNING and is_rendezvous(v.collective)
            ]
            if busy_inside and is_rendezvous(groups[0][0].collective) and not missing:
                findings += _busy_starting(busy_inside, ranked)
            else:
                findings += _all_waiting(groups[0], missing, severity, unseen)
    return findings + _thread_findings([d for d in threads if d not in used])
