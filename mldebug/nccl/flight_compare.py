"""Comparing ranks' Flight Recorder dumps, group by group, by collective sequence number.

Every member of a process group numbers its collectives on that group 1, 2, 3...; the
N-th must be the same op with the same sizes and dtypes on every member. So, per group:
- the first N where members recorded different ops, sizes or dtypes (a rank skipped a
  collective, called them in another order, or passed another tensor);
- members whose last N is lower than the collective the others wait in (a rank behind:
  it never joined, it is elsewhere);
- a collective every member entered that never completed (all wait: the transport, a
  timeout, a rank outside this group holding them).
Point-to-point ops are numbered separately per pair and not compared here.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import replace

from mldebug.model import (
    KIND_FR_BEHIND,
    KIND_FR_INCOMPLETE,
    KIND_FR_MISMATCH,
    SEVERITY_WARNING,
    Finding,
    FindingPart,
)
from mldebug.ranges import format_ranks

from .flight_model import FlightDump, FlightEntry, FlightGroup
from .flight_timing import arrival_findings

DEFAULT_GROUP = "default_pg"
MAX_FINDINGS_PER_GROUP = 3
DIFFER = {"op": "the op differs", "sizes": "the sizes differ", "dtypes": "the dtypes differ"}


def _group_text(name: str, desc: str) -> str:
    if desc == DEFAULT_GROUP:
        return "the default group"
    if desc and desc != "undefined":
        return f"group {name} ({desc})"
    return f"group {name}"


def _ranks_text(ranks) -> str:
    ranks = sorted(ranks)
    return ("rank " if len(ranks) == 1 else "ranks ") + format_ranks(ranks)


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
    """One process group as all dumps saw it: per rank its collectives by seq and its last."""

    def __init__(self, name: str):
        self.name = name
        self.desc = ""
        self.by_rank: dict[int, dict[int, FlightEntry]] = {}
        self.last: dict[int, int] = {}
        self.config_ranks: tuple[int, ...] | None = None
        self.backend = ""

    def add(self, rank: int, entries: dict[int, FlightEntry], group: FlightGroup | None) -> None:
        """One rank's collectives on this group (by seq) and its own view of the group."""
        self.by_rank[rank] = entries
        last = max(entries, default=0)
        if group is not None:
            self.desc = self.desc or group.desc
            self.config_ranks = self.config_ranks or group.ranks
            if group.last_enqueued is not None:
                last = max(last, group.last_enqueued)
        for entry in entries.values():
            self.desc = self.desc or entry.group_desc
            self.backend = self.backend or entry.backend
            break
        self.last[rank] = last

    def entry(self, seq: int) -> FlightEntry | None:
        """An entry of collective `seq` from any rank that recorded it."""
        for entries in self.by_rank.values():
            if seq in entries:
                return entries[seq]
        return None


def _groups(dumps: list[FlightDump]) -> list[_Group]:
    ranked: dict[int, FlightDump] = {}
    for dump in dumps:
        if dump.rank is not None and dump.rank not in ranked:
            ranked[dump.rank] = dump
    names: dict[str, _Group] = {}
    default = {e.group for d in ranked.values() for e in d.entries if e.group_desc == DEFAULT_GROUP}
    default |= {g.name for d in ranked.values() for g in d.groups if g.desc == DEFAULT_GROUP}
    for rank, dump in sorted(ranked.items()):
        collectives: dict[str, dict[int, FlightEntry]] = defaultdict(dict)
        for entry in dump.entries:  # one pass per dump: a dump may hold thousands of groups
            if not entry.p2p:
                collectives[entry.group][entry.seq] = entry
        configs = {g.name: g for g in dump.groups}
        mine = {e.group for e in dump.entries} | set(configs)
        for name in sorted(mine | default):
            names.setdefault(name, _Group(name)).add(
                rank, collectives.get(name, {}), configs.get(name)
            )
    return list(names.values())


def _mismatch(group: _Group) -> tuple[int, Finding] | None:
    """The first collective number whose op, sizes or dtypes differ between members."""
    ranks = sorted(group.by_rank)
    if len(ranks) < 2:
        return None
    common = set.intersection(*(set(group.by_rank[r]) for r in ranks))
    where = _group_text(group.name, group.desc)
    for seq in sorted(common):
        calls = {r: group.by_rank[r][seq] for r in ranks}
        ops = Counter(c.op for c in calls.values())
        if len(ops) > 1:
            what = "op"
        elif (
            _same_sizes_expected(calls[ranks[0]].op)
            and len({c.input_sizes for c in calls.values()}) > 1
        ):
            what = "sizes"
        elif len({c.input_dtypes for c in calls.values() if c.input_dtypes}) > 1:
            what = "dtypes"
        else:
            continue
        sides: dict[tuple, list[int]] = defaultdict(list)
        for rank, call in calls.items():
            sides[(call.op, call.input_sizes, call.input_dtypes)].append(rank)
        # The most ranks (the lowest rank on a tie) set what the collective should be.
        order = sorted(sides.values(), key=lambda rs: (-len(rs), rs[0]))
        most, odd = order[0], sorted(r for rs in order[1:] for r in rs)
        usual = calls[most[0]]
        odd_call = calls[odd[0]]
        if what == "op":
            summary = (
                f"{_ranks_text(odd)} did not join {usual.op} #{seq} of {where} that "
                f"{_ranks_text(most)} called: {'its' if len(odd) == 1 else 'their'} "
                f"#{seq} is {odd_call.op} (a collective skipped, or called in another order)"
            )
        else:
            summary = (
                f"{usual.op} #{seq} of {where} has {what} {_shape_text(odd_call)} on "
                f"{_ranks_text(odd)} but {_shape_text(usual)} on {_ranks_text(most)}"
            )
        parts = tuple(
            FindingPart(tuple(rs), _call_text(calls[rs[0]]), calls[rs[0]].location) for rs in order
        )
        return seq, Finding(
            kind=KIND_FR_MISMATCH,
            ranks=tuple(odd),
            summary=summary,
            location=odd_call.location,
            recipe="mismatched-collectives",
            detail=f"from torch's Flight Recorder dumps: {DIFFER[what]} at collective #{seq}",
            parts=parts,
        )
    return None


def _behind(group: _Group, before: int | None = None) -> Finding | None:
    """Members that never reached the collective the most advanced members wait in (only
    when that is collective `before` or earlier, where given)."""
    top = max(group.last.values(), default=0)
    leaders = sorted(r for r, last in group.last.items() if last == top)
    behind = sorted(r for r, last in group.last.items() if last < top)
    if not behind or top == 0:
        return None
    first = min(group.last[r] for r in behind) + 1
    if before is not None and first > before:
        return None
    waiting = [group.by_rank[r].get(top) for r in leaders]
    if any(entry is not None and entry.completed for entry in waiting):
        return None  # the leaders finished it: the dumps were taken at different moments
    where = _group_text(group.name, group.desc)
    missed = group.entry(first)
    op = f"{missed.op} #{first}" if missed else f"collective #{first}"
    lasts = sorted({group.last[r] for r in behind})
    stopped = " or ".join(f"#{n}" for n in lasts) if len(lasts) <= 3 else f"#{lasts[0]}..."
    summary = (
        f"{_ranks_text(behind)} never joined {op} of {where} that "
        f"{_ranks_text(leaders)} entered; {'its' if len(behind) == 1 else 'their'} "
        f"last is {stopped}"
    )
    parts = [
        FindingPart(
            tuple(r for r in behind if group.last[r] == n),
            f"last collective #{n}"
            + (f": {_call_text(e)}" if (e := group.entry(n)) is not None else ""),
            e.location if e is not None else None,
        )
        for n in lasts
    ]
    waiting_entry = next((e for e in waiting if e is not None), None)
    if waiting_entry is not None:
        parts.insert(
            0,
            FindingPart(
                tuple(leaders),
                f"waiting in {_call_text(waiting_entry)}",
                waiting_entry.location,
            ),
        )
    return Finding(
        kind=KIND_FR_BEHIND,
        ranks=tuple(behind),
        summary=summary,
        location=missed.location if missed else None,
        recipe="rank-behind",
        detail="from torch's Flight Recorder dumps: the others wait for these ranks",
        parts=tuple(parts),
    )


def _incomplete(group: _Group) -> Finding | None:
    """The last collective, entered by every member, that none has seen complete."""
    lasts = set(group.last.values())
    if len(lasts) != 1:
        return None
    seq = lasts.pop()
    calls = {r: e.get(seq) for r, e in group.by_rank.items()}
    pending = sorted(r for r, e in calls.items() if e is not None and not e.completed)
    if seq == 0 or not pending:
        return None
    entry = calls[pending[0]]
    where = _group_text(group.name, group.desc)
    nccl = group.backend == "nccl"
    timeout = f"; its timeout is {entry.timeout_ms / 1000:g} s" if entry.timeout_ms else ""
    return Finding(
        kind=KIND_FR_INCOMPLETE,
        ranks=tuple(pending),
        summary=(
            f"{entry.op} #{seq} of {where} had not completed on {_ranks_text(pending)} "
            f"when {'its dump was' if len(group.by_rank) == 1 else 'their dumps were'} "
            f"written{timeout}"
        ),
        location=entry.location,
        recipe="nccl-watchdog-timeout" if nccl else "collective-hang",
        detail=f"from torch's Flight Recorder dumps: {_call_text(entry)} on {group.backend}",
        severity=SEVERITY_WARNING,
        parts=(FindingPart(tuple(pending), _call_text(entry), entry.location),),
    )


def compare_flight_dumps(dumps: list[FlightDump]) -> list[Finding]:
    """Cross-rank findings from the dumps of one job (one per rank; unranked ones unused)."""
    findings: list[Finding] = []
    for group in _groups(dumps):
        mismatch = _mismatch(group)
        # After a mismatch at #N the counts part ways: only a rank behind before N is news.
        behind = _behind(group, before=mismatch[0] if mismatch else None)
        found = [f for f in (mismatch and mismatch[1], behind) if f]
        if not found:
            found = [f for f in (_incomplete(group),) if f is not None]
        absent = sorted(set(group.config_ranks or ()) - set(group.by_rank))
        if absent:  # members by torch's pg_config (NCCL) that left no dump: say so
            note = f"; no dump from {_ranks_text(absent)} of this group (by its pg_config)"
            found = [replace(f, detail=f.detail + note) for f in found]
        findings += found[:MAX_FINDINGS_PER_GROUP]
    findings += arrival_findings(dumps)  # who enters last, and the spread (flight_timing.py)
    return findings
