"""Ranks, from what their processes said: a rank may speak in several files (its
NCCL_DEBUG_FILE and its stderr), put together by rank, or by host and pid where no rank is
known. And the few lines a person reads first about each rank. Pure, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mldebug.model import FindingPart
from mldebug.nccl import logfacts as lp
from mldebug.ranges import format_ranks


@dataclass
class RankLog:
    """One rank (or one process of unknown rank) and everything its processes said."""

    rank: int | None
    label: str  # "rank 3", or "host:pid" / a file name when the rank is unknown
    procs: list[lp.ProcLog] = field(default_factory=list)

    def first(self, name: str) -> Any:  # the first of the processes' values of `name`
        for proc in self.procs:
            value = getattr(proc, name)
            if value is not None and value != ():
                return value
        return None

    @property
    def hosts(self) -> list[str]:
        return sorted({p.host for p in self.procs if p.host})

    @property
    def pids(self) -> list[int]:
        return sorted({p.pid for p in self.procs if p.pid is not None})

    @property
    def sources(self) -> list[str]:
        return sorted({p.source for p in self.procs})

    @property
    def comms(self) -> list[lp.Comm]:
        return [c for p in self.procs for c in p.comms.values()]

    @property
    def network(self) -> str | None:
        return self.first("network")

    @property
    def interface(self) -> str | None:
        """The interface its network uses: the socket's, else IB's out-of-band one."""
        socket_ifs = self.first("socket_ifs")
        if self.network == "Socket" and socket_ifs:
            return ",".join(socket_ifs)
        return self.first("ib_oob") or (",".join(socket_ifs) if socket_ifs else None)

    @property
    def timeouts(self) -> list[lp.TimeoutFact]:
        seen, out = set(), []
        for proc in self.procs:
            for fact in proc.timeouts:
                if (fact.pg, fact.seq, fact.op) not in seen:
                    seen.add((fact.pg, fact.seq, fact.op))
                    out.append(fact)
        return out

    def last_enqueued(self, pg: str) -> int | None:
        values = [p.last_enqueued[pg] for p in self.procs if pg in p.last_enqueued]
        return max(values) if values else None

    def last_completed(self, pg: str) -> int | None:
        values = [p.last_completed[pg] for p in self.procs if pg in p.last_completed]
        return max(values) if values else None

    @property
    def groups(self) -> list[str]:
        names = {pg for p in self.procs for pg in (*p.last_enqueued, *p.failed_seq)}
        names.update(t.pg for t in self.timeouts)
        return sorted(names, key=lambda n: (len(n), n))

    @property
    def errors(self) -> list[lp.ErrorFact]:
        return [e for p in self.procs for e in p.errors.values()]

    @property
    def warn_count(self) -> int:
        return sum(p.warn_count for p in self.procs)

    @property
    def last_warn(self) -> lp.WarnGroup | None:
        for proc in reversed(self.procs):
            if proc.last_warn is not None:
                return proc.last_warn
        return None

    @property
    def said_anything(self) -> bool:
        return any(p.nccl_lines or p.torch_lines for p in self.procs)


def ranks_of(procs: list[lp.ProcLog]) -> list[RankLog]:
    """Put processes together by rank; a process of unknown rank joins the rank that has
    its host and pid, else stands alone."""
    by_rank: dict[int, RankLog] = {}
    by_pid: dict[tuple, RankLog] = {}
    alone: list[lp.ProcLog] = []
    for proc in procs:
        if proc.rank is None:
            alone.append(proc)
            continue
        log = by_rank.setdefault(proc.rank, RankLog(proc.rank, f"rank {proc.rank}"))
        log.procs.append(proc)
        if proc.pid is not None:
            by_pid[(proc.host, proc.pid)] = log
    others: dict[tuple, RankLog] = {}
    for proc in alone:
        if not (proc.nccl_lines or proc.torch_lines):
            continue
        known = by_pid.get((proc.host, proc.pid)) if proc.pid is not None else None
        if known is not None:
            known.procs.append(proc)
            continue
        key = (proc.host, proc.pid) if proc.pid is not None else (proc.source,)
        label = f"{proc.host}:{proc.pid}" if proc.pid is not None else proc.source
        others.setdefault(key, RankLog(None, label)).procs.append(proc)
    return [by_rank[r] for r in sorted(by_rank)] + list(others.values())


def name_ranks(logs: list[RankLog]) -> str:
    ranks = [log.rank for log in logs if log.rank is not None]
    named = [log.label for log in logs if log.rank is None]
    parts = []
    if ranks:
        parts.append(f"{'rank' if len(ranks) == 1 else 'ranks'} {format_ranks(ranks)}")
    if named:
        parts.append(
            ", ".join(named[:4]) + (f" and {len(named) - 4} more" if len(named) > 4 else "")
        )
    return " and ".join(parts) or "no rank"


def verb(logs: list, one: str, many: str) -> str:
    return one if len(logs) == 1 else many


def ranks_in(logs: list[RankLog]) -> tuple[int, ...]:
    return tuple(sorted({log.rank for log in logs if log.rank is not None}))


def sides(values: dict[str, list[RankLog]]) -> tuple[list[tuple[str, list[RankLog]]], str]:
    """The values ordered most common first, and the text "A on ranks..; B on ranks..."."""
    ordered = sorted(values.items(), key=lambda item: (-len(item[1]), item[0]))
    return ordered, "; ".join(f"{value} on {name_ranks(logs)}" for value, logs in ordered)


def parts_of(ordered: list[tuple[str, list[RankLog]]]) -> tuple[FindingPart, ...]:
    return tuple(FindingPart(ranks_in(logs), value) for value, logs in ordered)


def summary_lines(log: RankLog) -> list[str]:
    """What one rank's logs say, a few lines a person reads first."""
    head = [log.label]
    if log.hosts:
        head.append(f"host {','.join(log.hosts[:3])}")
    if log.pids:
        head.append(f"pid {','.join(map(str, log.pids[:3]))}")
    device = log.first("device")
    if device is not None:
        head.append(f"GPU {device}")
    versions = []
    if log.first("nccl_version"):
        versions.append(f"NCCL {log.first('nccl_version')}")
    if log.first("cuda_runtime"):
        versions.append(f"CUDA {log.first('cuda_runtime')}")
    if log.first("cuda_driver"):
        versions.append(f"driver {log.first('cuda_driver')}")
    lines = ["  ".join(head + versions)]
    net = log.network
    if net or log.interface:
        ib = log.first("ib_devices")
        lines.append(
            f"  network {net or '?'}"
            + (f" via {log.interface}" if log.interface else "")
            + (f"; IB devices {','.join(ib[:4])}" if ib else "")
            + (f"; bootstrap {log.first('bootstrap_if')}" if log.first("bootstrap_if") else "")
        )
    comms = log.comms
    if comms:
        done = sum(1 for c in comms if c.completed)
        stuck = sum(1 for c in comms if c.started and not c.completed)
        lines.append(
            f"  communicators {len(comms)}: {done} Init COMPLETE"
            + (f", {stuck} never completed" if stuck else "")
            + (
                f", {sum(1 for c in comms if c.aborted)} aborted"
                if any(c.aborted for c in comms)
                else ""
            )
        )
    for fact in log.timeouts[:3]:
        ran = f", ran {fact.ran_ms} ms" if fact.ran_ms is not None else ""
        limit = f", timeout {fact.timeout_ms} ms" if fact.timeout_ms is not None else ""
        how = "blocking wait timed out" if fact.blocking else "watchdog timeout"
        sizes = "".join(
            f" {name} {value}"
            for name, value in (("NumelIn", fact.numel_in), ("NumelOut", fact.numel_out))
            if value is not None
        )
        seq = f"SeqNum {fact.seq} " if fact.seq is not None else ""
        what = f"{seq}{fact.op}" if fact.op else f"{seq}a collective".lstrip()  # nccl2: no op
        lines.append(f"  {how}: {what}{sizes}{limit}{ran} (PG {fact.pg})")
    for pg in log.groups[:3]:
        if log.last_enqueued(pg) is not None:
            lines.append(
                f"  PG {pg}: last enqueued {log.last_enqueued(pg)}, last completed "
                f"{log.last_completed(pg)}"
            )
    if log.warn_count:
        last = log.last_warn
        lines.append(
            f"  {log.warn_count} WARN" + (f", last: {last.text[:160]}" if last is not None else "")
        )
    for error in log.errors[:3]:
        if error.kind != lp.ERR_HEARTBEAT:
            lines.append(f"  {error.kind}: {error.text[:160]}")
    return lines
