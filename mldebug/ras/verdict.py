"""What RAS's launch counts say, judged with the stacks: which ranks launched collective N of
a communicator and which did not, and which side is behind.

RAS counts *launches*, not completions: equal counts do not mean the last collective
finished (NVIDIA/nccl#1730). On a count mismatch NCCL lists the smaller side, which may be
the ranks ahead (30 ranks at 640 and 2 at 641, NVIDIA/nccl#1911). So the side behind is the
one whose stacks are outside any collective; without stacks, the lower count.

    ras_findings(reports, stacks=None, rank_of=None) -> [Finding]
    view_findings(report, views) -> [Finding], with the stacks and ranks of the views read
stacks: pid -> the collective its main thread is in (None: outside any), for the processes
read; rank_of: pid -> global rank, so findings name global ranks (else communicator ranks).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from mldebug.ledger.compare import RasCount, compare_group, from_ras_counts
from mldebug.ledger.verdicts import VERDICT_BEHIND, ledger_finding
from mldebug.model import (
    SEVERITY_ERROR,
    SEVERITY_INFO,
    SEVERITY_WARNING,
    SOURCE_RAS,
    Finding,
    FindingPart,
    RankView,
    SourceFindings,
)
from mldebug.ranges import format_ranks
from mldebug.textsafe import one_line

from .model import ALL_OPS, RasComm, RasCountGroup, RasReport
from .read import RasError, parse_ras

KIND_NCCL_RAS = "nccl_ras"  # the lead may move this beside the other KIND_* in model.py
NOT_COMPLETIONS = (
    "RAS counts launches, not completions: ranks that launched a collective may still wait "
    "in it (NVIDIA/nccl#1730)"
)
MAX_FINDINGS = 16


def ras_findings(
    reports: Sequence[RasReport],
    stacks: Mapping[int, str | None] | None = None,
    rank_of: Mapping[int, int] | None = None,
) -> list[Finding]:
    found: list[Finding] = []
    for report in reports:
        for comm in report.comms:
            found += _comm_findings(report, comm, stacks or {}, rank_of or {})
        seen = {r.pid for c in report.comms for r in c.missing}
        dead = [(pid, host) for pid, host in report.dead if pid not in seen]
        if dead:
            procs = ", ".join(f"process {pid} on {host}" for pid, host in dead[:8])
            found.append(
                Finding(
                    KIND_NCCL_RAS,
                    (),
                    one_line(f"NCCL RAS considers {len(dead)} job process(es) dead: {procs}"),
                    recipe="rank-outside-collective",
                    detail=_source(report),
                )
            )
    return found[:MAX_FINDINGS]


def view_findings(report: RasReport, views: Sequence[RankView]) -> list[Finding]:
    """RAS's findings judged with the stacks of the ranks read (`dump` here, or every
    node's for `dump --slurm/--hosts`). RAS names processes by pid: a pid read on two
    hosts says nothing sure, and is left out."""
    hosts: dict[int, set[str]] = {}
    for view in views:
        if view.target is not None and view.target.pid:
            hosts.setdefault(view.target.pid, set()).add(view.target.host)
    sure = [
        v for v in views if v.target is not None and v.target.pid and len(hosts[v.target.pid]) == 1
    ]
    stacks = {v.target.pid: v.collective for v in sure}  # type: ignore[union-attr]
    rank_of = {v.target.pid: v.rank for v in sure}  # type: ignore[union-attr]
    return ras_findings([report], stacks, rank_of)


def carried_findings(
    views: Sequence[RankView], answers: Sequence[tuple[str, str]]
) -> SourceFindings:
    """What the first RAS answer the nodes carried that reads says (every process answers
    for the whole job), judged with every node's stacks; and notes saying what was used and
    what could not be read."""
    notes: list[str] = []
    for source, text in answers:
        try:
            report = parse_ras(text.encode("utf-8", "replace"), source)
        except RasError as error:
            notes.append(f"RAS {one_line(str(error))}")
            continue
        found = view_findings(report, views)
        notes.append(f"NCCL RAS {source} answered (NCCL {report.nccl_version or '?'})")
        return SourceFindings(found=tuple(found), notes=tuple(notes))
    return SourceFindings(notes=tuple(notes))


def _source(report: RasReport) -> str:
    text = f"NCCL {report.nccl_version or '?'} RAS ({report.format}) {report.path}"
    return one_line(text + (f"; {report.repaired}" if report.repaired else ""))


def _who(comm: RasComm, members: Sequence[int], rank_of: Mapping[int, int]) -> tuple[int, ...]:
    """Communicator ranks as global ranks where the pids say them."""
    pids = {r.rank: r.pid for r in comm.ranks + comm.missing}
    out = [rank_of.get(pids.get(m) or -1, m) for m in members]
    return tuple(sorted(out))


def _comm_findings(
    report: RasReport, comm: RasComm, stacks: Mapping[int, str | None], rank_of: Mapping[int, int]
) -> list[Finding]:
    found: list[Finding] = []
    name = f"communicator {comm.hash or comm.label}"
    if comm.missing:
        ranks = _who(comm, [r.rank for r in comm.missing], rank_of)
        dead = [r for r in comm.missing if r.dead]
        found.append(
            Finding(
                KIND_NCCL_RAS,
                ranks,
                one_line(
                    f"NCCL RAS had no data from rank(s) {format_ranks(ranks)} of {name}"
                    + (" (considered dead)" if dead else "")
                    + ": the process hangs outside NCCL's reach, or is gone"
                ),
                recipe="rank-outside-collective",
                detail=_source(report),
            )
        )
    odd = [r for r in comm.ranks if r.status in ("ABORT", "INIT") and r.status != comm.status]
    if odd:
        ranks = _who(comm, [r.rank for r in odd], rank_of)
        found.append(
            Finding(
                KIND_NCCL_RAS,
                ranks,
                one_line(
                    f"rank(s) {format_ranks(ranks)} of {name} are in {odd[0].status} while the "
                    f"others are {comm.status or 'RUNNING'} (NCCL RAS)"
                ),
                recipe="nccl-warnings",
                severity=SEVERITY_WARNING,
                detail=_source(report),
            )
        )
    ops: dict[str, list[RasCountGroup]] = {}
    for group in comm.count_groups:
        ops.setdefault(group.op, []).append(group)
    for op, groups in ops.items():
        finding = _behind(report, comm, op, groups, stacks, rank_of)
        if finding is not None:
            found.append(finding)
    if not ops and not comm.missing and comm.complete and stacks:
        found += _all_launched(report, comm, stacks, rank_of)
    return found


def _pids_of(
    comm: RasComm, groups: Sequence[RasCountGroup], stacks: Mapping[int, str | None]
) -> list[set[int]]:
    """The pids of each group; in the text form the one unnamed group (NCCL names outliers
    only) gets the processes read that no group names, when they are the whole communicator."""
    pid = {r.rank: r.pid for r in comm.ranks}
    sets: list[set[int]] = [{p for m in g.listed if (p := pid.get(m))} for g in groups]
    unnamed = [i for i, g in enumerate(groups) if len(g.listed) < g.ranks]
    if len(unnamed) == 1 and comm.size and len(stacks) == comm.size:
        named = set().union(*sets)
        rest = {p for p in stacks if p not in named}
        if len(rest) + len(sets[unnamed[0]]) == groups[unnamed[0]].ranks:
            sets[unnamed[0]] |= rest
    return sets


def _ledger_behind(comm: RasComm, op: str) -> set[int] | None:
    """The ranks the collective ledger names behind on this op's launch counts, where every
    rank's count is known (the JSON form); None where it is not."""
    if not comm.complete:
        return None
    name = comm.hash or comm.label
    counts = [RasCount(name, rank, op, n) for rank, n in comm.launches().get(op, {}).items()]
    if not counts:
        return None
    ((group, progress),) = from_ras_counts(counts).items()
    return set(compare_group(group, progress).ranks_behind)


def _behind(
    report: RasReport,
    comm: RasComm,
    op: str,
    groups: list[RasCountGroup],
    stacks: Mapping[int, str | None],
    rank_of: Mapping[int, int],
) -> Finding | None:
    if len({g.launched for g in groups}) < 2:
        return None  # one count only (a report cut short): nothing to compare
    top = max(g.launched for g in groups)
    pids = _pids_of(comm, groups, stacks)
    behind_by_counts = _ledger_behind(comm, op)
    if behind_by_counts is None:  # the text form names outliers only: by its groups' counts
        lower = [i for i, g in enumerate(groups) if g.launched < top]
    else:
        lower = [i for i, g in enumerate(groups) if g.listed and set(g.listed) <= behind_by_counts]
    ahead = [i for i in range(len(groups)) if i not in lower]
    if not lower or not ahead:
        return None

    def outside(indices: list[int]) -> bool | None:
        """Are these groups' processes outside any collective (True), all in one (False)?"""
        seen = [stacks[p] for i in indices for p in pids[i] if p in stacks]
        if not seen:
            return None
        if all(s is None for s in seen):
            return True
        return False if all(s is not None for s in seen) else None

    behind, how = lower, "by the counts (no stacks to tell)"
    low_out, top_out = outside(lower), outside(ahead)
    if low_out and top_out is False:
        how = "their stacks are outside any collective; the others wait in one"
    elif top_out and low_out is False:
        behind = ahead
        how = (
            "their stacks are outside any collective while the ranks with fewer launches wait "
            "in one: they went on without the others"
        )
    elif low_out is not None or top_out is not None:
        how = "by the counts; the stacks do not part the same way"
    kind = "collectives" if op == ALL_OPS else f"{op} operations"

    def side(indices: list[int]) -> tuple[tuple[int, ...], int]:
        """The side's ranks (global where every pid maps, else the communicator's) and size."""
        count = sum(groups[i].ranks for i in indices)
        mine = [p for i in indices for p in pids[i]]
        if rank_of and mine and all(p in rank_of for p in mine):
            return tuple(sorted(rank_of[p] for p in mine)), count
        return tuple(sorted(m for i in indices for m in groups[i].listed)), count

    late, late_n = side(behind)
    early, early_n = side(ahead if behind is lower else lower)
    late_at = max(groups[i].launched for i in behind)
    early_at = top if behind is lower else max(groups[i].launched for i in lower)

    def label(ranks: tuple[int, ...], count: int) -> str:
        if ranks and len(ranks) == count:
            return f"rank{'s' if count > 1 else ''} {format_ranks(ranks)}"
        return f"{count} ranks" + (f" (NCCL named {format_ranks(ranks)})" if ranks else "")

    where = f"communicator {comm.hash or comm.label}"
    if behind is lower:
        summary = (
            f"{label(late, late_n)} of {comm.size or '?'} never launched {op} #{top} of "
            f"{where} that {label(early, early_n)} launched ("
            + (f"their last is #{late_at}" if late_at else "they launched none")
            + f"): {how}"
        )
    else:
        summary = (
            f"{label(late, late_n)} launched {op} #{top} of {where} and "
            f"{label(early, early_n)} stopped at #{early_at}: {how}"
        )
    note = ""
    smaller = min(groups, key=lambda g: g.ranks)
    if not comm.complete and smaller.listed and smaller.launched == top and behind is lower:
        note = "; NCCL's report names the smaller side, here the ranks ahead (NVIDIA/nccl#1911)"
    parts = tuple(
        FindingPart(ranks, f"launched {kind} up to #{at}")
        for ranks, at in ((early, early_at), (late, late_at))
        if ranks
    )
    return ledger_finding(
        VERDICT_BEHIND,
        late,
        one_line(summary),
        source=SOURCE_RAS,
        group=f"{comm.hash or comm.label}:{op}",
        seq=top,
        op=None if op == ALL_OPS else op,
        waiting=early,
        detail=one_line(f"{NOT_COMPLETIONS}{note}. {_source(report)}"),
        severity=SEVERITY_ERROR,
        parts=parts,
    )


def _all_launched(
    report: RasReport, comm: RasComm, stacks: Mapping[int, str | None], rank_of: Mapping[int, int]
) -> list[Finding]:
    """Counts agree and every rank read waits in a collective: NCCL launched it everywhere,
    and it did not complete. Said as information: the stacks' own finding is the verdict."""
    mine = [r for r in comm.ranks if r.pid is not None and r.pid in stacks]
    if not mine or len(mine) < len(comm.ranks) or any(stacks[r.pid or 0] is None for r in mine):
        return []
    last = max(mine[0].counts, key=lambda kv: kv[1], default=None)
    if last is None or last[1] == 0:
        return []
    ranks = _who(comm, [r.rank for r in mine], rank_of)
    return [
        Finding(
            KIND_NCCL_RAS,
            ranks,
            one_line(
                f"NCCL RAS: every rank of communicator {comm.hash or comm.label} launched the "
                f"same collectives ({last[0]} up to #{last[1]}) and all wait in one: it was "
                "launched everywhere and did not complete"
            ),
            recipe="nccl-watchdog-timeout",
            detail=one_line(f"{NOT_COMPLETIONS}. {_source(report)}"),
            severity=SEVERITY_INFO,
        )
    ]
