"""Comparing ranks' Flight Recorder dumps, group by group, by collective sequence number.

Every member of a process group numbers its collectives on that group 1, 2, 3...; the
N-th must be the same op with the same sizes and dtypes on every member. So, per group:
- the first N where members recorded different ops, sizes or dtypes (a rank skipped a
  collective, called them in another order, or passed another tensor);
- members whose last N is lower than the collective the others wait in (a rank behind:
  it never joined, it is elsewhere);
- a collective every member entered that never completed (all wait: the transport, a
  timeout, a rank outside this group holding them);
- point-to-point ops: each send matched with the receive at the other end (NCCL names both
  ends in the entry: `nccl:send 0->1`, `nccl:recv 1<-0`).
The judging is the collective ledger's (mldebug/ledger/compare.py), the same as for the agents'
states and the watchdog's lines: the majority decides the culprit (never "the first rank
is right"), and every mismatch of a group is reported, up to the ledger's cap.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

import mldebug.ledger.compare as ledger
import mldebug.ledger.rules as rules
from mldebug.ledger.verdicts import (
    VERDICT_BEHIND,
    VERDICT_HANG,
    VERDICT_MISMATCH,
    VERDICT_P2P,
    ledger_finding,
)
from mldebug.model import (
    KIND_FR_INCOMPLETE,
    SEVERITY_WARNING,
    SOURCE_FLIGHT,
    CollectiveRef,
    Finding,
    FindingPart,
)
from mldebug.wording import ranks_text as _ranks_text

from .lanes import Book, Lane, call_of, empty_lane, lanes_of
from .model import FlightDump, FlightEntry, FlightGroup
from .table import first_of_groups
from .timing import arrival_findings

DEFAULT_GROUP = rules.DEFAULT_GROUP
MAX_FINDINGS_PER_GROUP = 6
DIFFER = {
    ledger.KIND_OP: "the op differs",
    ledger.KIND_SHAPES: "the sizes differ",
    ledger.KIND_DTYPES: "the dtypes differ",
    ledger.KIND_TOTALS: "the all_to_all totals differ",
    ledger.KIND_STATE: "the state differs",
}


def _group_text(name: str, desc: str) -> str:
    if desc == DEFAULT_GROUP:
        return "the default group"
    if desc and desc != "undefined":
        return f"group {name} ({desc})"
    return f"group {name}"


def _shape_text(entry: FlightEntry) -> str:
    sizes = ",".join("[" + ",".join(map(str, s)) + "]" for s in entry.input_sizes)
    dtypes = ",".join(dict.fromkeys(entry.input_dtypes))
    return f"{dtypes or '?'}{sizes or '[]'}"


def _call_text(entry: FlightEntry) -> str:
    at = f" ({entry.location})" if entry.location else ""
    return f"{entry.op} #{entry.seq} {_shape_text(entry)}{at}"


def _same_sizes_expected(op: str) -> bool:
    """Must every member pass inputs of the same sizes? Not to scatter (the root's list),
    all-to-all (uneven splits) or the uneven `_v` ops; torch's own analyser agrees."""
    return not (op == "scatter" or op.endswith("_v") or "all_to_all" in op or "alltoall" in op)


class _Group:
    """One process group as all dumps saw it: per rank its lane (flight_lanes) and last."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.desc = ""
        self.by_rank: dict[int, Lane] = {}
        self.p2p: dict[int, list[FlightEntry]] = {}
        self.last: dict[int, int] = {}
        self.done: dict[int, int | None] = {}
        self.config_ranks: tuple[int, ...] | None = None
        self.backend = ""

    def add(
        self,
        rank: int,
        lane: Lane,
        group: FlightGroup | None,
        p2p: list[FlightEntry] | None = None,
    ) -> None:
        """One rank's collectives on this group and its own view of the group."""
        self.by_rank[rank] = lane
        self.p2p[rank] = p2p or []
        last, done = lane.last, lane.done
        if group is not None:
            self.desc = self.desc or group.desc
            self.config_ranks = self.config_ranks or group.ranks
            if group.last_enqueued is not None:
                last = max(last, group.last_enqueued)
            if group.last_completed is not None:
                done = max(done or 0, group.last_completed)
        self.done[rank] = done
        self.desc = self.desc or lane.desc
        self.backend = self.backend or lane.backend
        self.last[rank] = last

    def entry(self, seq: int) -> FlightEntry | None:
        """An entry of collective `seq` from any rank that recorded it."""
        for lane in self.by_rank.values():
            if seq in lane:
                return lane.get(seq)
        return None


def _groups(dumps: list[FlightDump], book: Book) -> list[_Group]:
    ranked: dict[int, FlightDump] = {}
    for dump in dumps:
        if dump.rank is not None and dump.rank not in ranked:
            ranked[dump.rank] = dump
    names: dict[str, _Group] = {}
    firsts = {rank: first_of_groups(dump.entries) for rank, dump in ranked.items()}
    default = {g for f in firsts.values() for g, (_, desc) in f.items() if desc == DEFAULT_GROUP}
    default |= {g.name for d in ranked.values() for g in d.groups if g.desc == DEFAULT_GROUP}
    for rank, dump in sorted(ranked.items()):
        lanes, p2p = lanes_of(dump, book)
        configs = {g.name: g for g in dump.groups}
        mine = set(firsts[rank]) | set(configs)
        for name in sorted(mine | default):
            lane = lanes.get(name) or empty_lane()
            names.setdefault(name, _Group(name)).add(rank, lane, configs.get(name), p2p.get(name))
    return list(names.values())


def _progress(group: _Group) -> dict[int, ledger.RankProgress]:
    trimmed = _trimmed(group)
    return {
        rank: ledger.RankProgress(
            rank,
            group.last[rank],
            group.done.get(rank),
            trimmed.get(id(lane.calls), lane.calls),
            p2p=tuple(call_of(e, rank) for e in sorted(group.p2p.get(rank, []), key=_p2p_order)),
        )
        for rank, lane in group.by_rank.items()
    }


MAX_DISTINCT = 64  # distinct lanes worth trimming (more: the ledger reads them whole)


def _distinct(calls: Iterable[ledger.Call]) -> Iterable[ledger.Call]:
    return {id(c): c for c in calls}.values()  # shared records: by identity, unhashed


def _trimmed(group: _Group) -> dict[int, dict[int, ledger.Call]]:
    """The lanes' calls cut to the numbers the ledger's verdict can turn on, per distinct
    calls mapping (ranks whose rings say the same share one): where the calls made differ
    (and the number before, for "a loop ran once more"), an all_to_all anywhere, and every
    rank's last. At every other number all calls agree, and the ledger passes over it;
    1,024 ranks then cost the ledger a few numbers each, not 2,000."""
    distinct = {id(lane.calls): lane.calls for lane in group.by_rank.values()}
    if len(distinct) > MAX_DISTINCT or len(group.by_rank) < 2:
        return {}
    lanes = list(distinct.values())
    if any(c.op in rules.P2P_OPS for calls in lanes for c in _distinct(calls.values())):
        return {}  # p2p numbered with the collectives: the ledger reads those whole
    keep = set(group.last.values())
    for seq in set().union(*lanes):
        calls = [c for c in (calls.get(seq) for calls in lanes) if c is not None]
        first = calls[0]
        if first.op in rules.ALL_TO_ALL_OPS or any(
            c is not first
            and (
                c.op != first.op
                or c.shapes != first.shapes
                or c.dtypes != first.dtypes
                or c.state != first.state
            )
            for c in calls
        ):
            keep.update((seq, seq - 1))
    return {key: {s: c for s, c in calls.items() if s in keep} for key, calls in distinct.items()}


def _p2p_order(entry: FlightEntry) -> tuple[int, int]:
    return (entry.seq, entry.record_id or 0)


def _verdict(group: _Group) -> ledger.GroupVerdict:
    # A member by pg_config that left no dump is not known to be behind: only counted.
    # gloo's dumps list no members: the default group's are the ranks that dumped.
    size = len(group.config_ranks) if group.config_ranks else None
    if size is None and group.desc == DEFAULT_GROUP:
        size = len(group.by_rank)
    return ledger.compare_group(_name(group), _progress(group), size=size, inputs=True)


def _name(group: _Group) -> str:
    return rules.group_of_entry(group.name, group.desc)


def _mismatch_findings(group: _Group, verdict: ledger.GroupVerdict) -> list[Finding]:
    found = []
    p2p = set(verdict.p2p)
    for mismatch in (*verdict.mismatches, *verdict.p2p):
        sides = [(s.ranks, s.call) for s in mismatch.sides if s.call is not None]
        parts = tuple(
            FindingPart(ranks, _side_label(group, mismatch, ranks[0], call, p2p), call.site)
            for ranks, call in sides
        )
        odd = mismatch.culprits or sides[-1][0]
        located = next((call.site for ranks, call in sides if ranks == odd), None)
        odd_call = next((call for ranks, call in sides if ranks == odd), None)
        found.append(
            ledger_finding(
                VERDICT_P2P if mismatch in p2p else VERDICT_MISMATCH,
                odd,
                mismatch.text,
                source=SOURCE_FLIGHT,
                group=_name(group),
                seq=mismatch.seq,
                op=odd_call.op if odd_call is not None else None,
                location=located,
                detail=(
                    f"from torch's Flight Recorder dumps: {DIFFER[mismatch.kind]} at "
                    f"collective #{mismatch.seq}"
                    + ("" if mismatch.culprits else "; no side has fewer ranks")
                ),
                parts=parts,
            )
        )
    return found


def _side_label(
    group: _Group, mismatch: ledger.Mismatch, rank: int, call: ledger.Call, p2p: set
) -> str:
    """`all_reduce #4 Float[4]` from the rank's entry; a p2p op by its own number."""
    lane = group.by_rank.get(rank)
    entry = lane.get(mismatch.seq) if lane is not None else None
    if entry is None or mismatch in p2p:
        return f"{call.op} #{mismatch.seq}"
    return _call_text(entry)


def _behind_findings(group: _Group, verdict: ledger.GroupVerdict) -> list[Finding]:
    found = []
    waiting = verdict.waiting
    top = verdict.top
    entry = next((group.by_rank[r].get(top) for r in waiting if top in group.by_rank[r]), None)
    for behind in verdict.behind:
        lasts = sorted({group.last.get(r, 0) for r in behind.ranks})
        parts = [
            FindingPart(
                tuple(r for r in behind.ranks if group.last.get(r, 0) == n),
                f"last collective #{n}"
                + (f": {_call_text(e)}" if (e := group.entry(n)) is not None else ""),
                e.location if e is not None else None,
            )
            for n in lasts
        ]
        if entry is not None:
            parts.insert(
                0, FindingPart(tuple(waiting), f"waiting in {_call_text(entry)}", entry.location)
            )
        found.append(
            ledger_finding(
                VERDICT_BEHIND,
                behind.ranks,
                f"{behind.text}; {_ranks_text(waiting)} "
                f"{'waits' if len(waiting) == 1 else 'wait'} in it",
                source=SOURCE_FLIGHT,
                group=verdict.group,
                seq=top,
                op=verdict.call.op if verdict.call is not None else None,
                waiting=waiting,
                location=entry.location if entry is not None else None,
                detail="from torch's Flight Recorder dumps: the others wait for these ranks",
                parts=parts,
            )
        )
    return found


def _incomplete(group: _Group, verdict: ledger.GroupVerdict) -> Finding | None:
    """The last collective, entered by every member, that none has seen complete (in the
    ledger's words when every member of the group left a dump)."""
    lasts = set(group.last.values())
    if len(lasts) != 1:
        return None
    seq = lasts.pop()
    calls = {r: e.get(seq) for r, e in group.by_rank.items()}
    pending = sorted(r for r, e in calls.items() if e is not None and not e.completed)
    if seq == 0 or not pending:
        return None
    entry = calls[pending[0]]
    if entry is None:
        return None
    where = _group_text(group.name, group.desc)
    nccl = group.backend == "nccl"
    timeout = f"; its timeout is {entry.timeout_ms / 1000:g} s" if entry.timeout_ms else ""
    when = f"when {'its dump was' if len(group.by_rank) == 1 else 'their dumps were'} written"
    summary = (
        f"{verdict.hang} ({when}{timeout})"
        if verdict.hang is not None and len(group.by_rank) > 1
        else f"{entry.op} #{seq} of {where} had not completed on {_ranks_text(pending)} "
        f"{when}{timeout}"
    )
    detail = f"from torch's Flight Recorder dumps: {_call_text(entry)} on {group.backend}"
    parts = (FindingPart(tuple(pending), _call_text(entry), entry.location),)
    if verdict.hang is not None and len(group.by_rank) > 1:
        # Every member entered it and none completed it: the ledger's hang.
        return ledger_finding(
            VERDICT_HANG,
            pending,
            summary,
            source=SOURCE_FLIGHT,
            group=verdict.group,
            seq=seq,
            op=entry.op,
            waiting=pending,
            location=entry.location,
            detail=detail,
            severity=SEVERITY_WARNING,  # as the dumps were written: a timeout ended it since
            parts=parts,
        )
    return Finding(
        kind=KIND_FR_INCOMPLETE,
        ranks=tuple(pending),
        summary=summary,
        location=entry.location,
        recipe="nccl-watchdog-timeout" if nccl else "collective-hang",
        detail=detail,
        severity=SEVERITY_WARNING,
        parts=parts,
        collective=CollectiveRef(verdict.group, seq, rules.op_name(entry.op)),
        sources=(SOURCE_FLIGHT,),
    )


def compare_flight_dumps(dumps: list[FlightDump]) -> list[Finding]:
    """Cross-rank findings from the dumps of one job (one per rank; unranked ones unused)."""
    findings: list[Finding] = []
    for group in _groups(dumps, Book()):
        verdict = _verdict(group)
        found = _mismatch_findings(group, verdict) + _behind_findings(group, verdict)
        if not found:
            found = [f for f in (_incomplete(group, verdict),) if f is not None]
        absent = sorted(set(group.config_ranks or ()) - set(group.by_rank))
        if absent:  # members by torch's pg_config (NCCL) that left no dump: say so
            note = f"; no dump from {_ranks_text(absent)} of this group (by its pg_config)"
            found = [replace(f, detail=f.detail + note) for f in found]
        findings += found[:MAX_FINDINGS_PER_GROUP]
    findings += arrival_findings(dumps)  # who enters last, and the spread (flight_timing.py)
    return findings
