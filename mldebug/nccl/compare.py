"""From what each process said (`logparse.ProcLog`) to ranks, and from ranks to findings.

A rank may speak in several files (its NCCL_DEBUG_FILE and its stderr): its processes are
put together by rank, or by host and pid where no rank is known. Then the ranks are set
side by side, the way a person greps a hundred logs for the odd one out: who never reached
Init COMPLETE, who is on sockets while the others use InfiniBand, who runs another NCCL,
whose last enqueued collective is behind the one the others timed out in, who could not
connect to whom, and which WARN lines the ranks share. Pure functions, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mldebug.model import (
    KIND_CONNECTION,
    KIND_DIST_ERROR,
    KIND_NCCL_INIT,
    KIND_NCCL_NETWORK,
    KIND_NCCL_TIMEOUT,
    KIND_NCCL_VERSION,
    KIND_NCCL_WARNING,
    SEVERITY_ERROR,
    SEVERITY_INFO,
    SEVERITY_WARNING,
    Finding,
    FindingPart,
)
from mldebug.nccl import logparse as lp
from mldebug.ranges import format_ranks

RECIPE_TIMEOUT = "nccl-watchdog-timeout"
RECIPE_INIT = "nccl-init-failure"
RECIPE_SOCKETS = "nccl-sockets-instead-of-ib"
RECIPE_VERSION = "nccl-version-mismatch"
RECIPE_WARNINGS = "nccl-warnings"
RECIPE_CONNECTION = "connection-refused"
RECIPE_HANG = "collective-hang"
RECIPE_MISMATCH = "mismatched-collectives"
RECIPE_OUTSIDE = "rank-outside-collective"
MAX_WARN_FINDINGS = 8  # distinct WARN messages reported; the rest are counted


@dataclass
class RankLog:
    """One rank (or one process of unknown rank) and everything its processes said."""

    rank: int | None
    label: str  # "rank 3", or "host:pid" / a file name when the rank is unknown
    procs: list[lp.ProcLog] = field(default_factory=list)

    def first(self, name: str):
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


def _who(logs: list[RankLog]) -> str:
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


def _verb(logs: list, one: str, many: str) -> str:
    return one if len(logs) == 1 else many


def _ranks(logs: list[RankLog]) -> tuple[int, ...]:
    return tuple(sorted({log.rank for log in logs if log.rank is not None}))


def _sides(values: dict[str, list[RankLog]]) -> tuple[list[tuple[str, list[RankLog]]], str]:
    """The values ordered most common first, and the text "A on ranks..; B on ranks..."."""
    ordered = sorted(values.items(), key=lambda item: (-len(item[1]), item[0]))
    return ordered, "; ".join(f"{value} on {_who(logs)}" for value, logs in ordered)


def _parts(ordered: list[tuple[str, list[RankLog]]]) -> tuple[FindingPart, ...]:
    return tuple(FindingPart(_ranks(logs), value) for value, logs in ordered)


# ---- Init --------------------------------------------------------------------------------


def _init(logs: list[RankLog]) -> list[Finding]:
    found = []
    started_only = [log for log in logs if any(c.started and not c.completed for c in log.comms)]
    if started_only:
        comm = next(c for c in started_only[0].comms if c.started and not c.completed)
        done = [
            log for log in logs if log not in started_only and any(c.completed for c in log.comms)
        ]
        found.append(
            Finding(
                KIND_NCCL_INIT,
                _ranks(started_only),
                f"{_who(started_only)} started NCCL communicator init (nranks {comm.nranks}) "
                "and never reached Init COMPLETE"
                + (f", which {_who(done)} reached" if done else "")
                + ": a peer never joined, or the bootstrap/network between them fails "
                "(NCCL_SOCKET_IFNAME, firewall)",
                recipe=RECIPE_INIT,
                detail="; ".join(
                    f"{log.label}: {', '.join(log.sources)}" for log in started_only[:8]
                ),
            )
        )
    # A communicator (by commId) that some ranks completed and others that speak never began.
    members: dict[str, list[RankLog]] = {}
    sizes: dict[str, int] = {}
    for log in logs:
        for comm in log.comms:
            if comm.comm_id:
                members.setdefault(comm.comm_id, []).append(log)
                sizes[comm.comm_id] = comm.nranks
    speaking = [log for log in logs if any(p.nccl_lines for p in log.procs)]
    for comm_id, present in members.items():
        absent = [log for log in speaking if log not in present and log.rank is not None]
        if absent and len(present) < sizes[comm_id] and len(present) > 1:
            found.append(
                Finding(
                    KIND_NCCL_INIT,
                    _ranks(absent),
                    f"{_who(absent)} never began NCCL communicator {comm_id} "
                    f"(nranks {sizes[comm_id]}) that {_who(present)} initialised",
                    recipe=RECIPE_INIT,
                )
            )
            break
    return found


# ---- Network -----------------------------------------------------------------------------


def _network(logs: list[RankLog]) -> list[Finding]:
    found = []
    nets: dict[str, list[RankLog]] = {}
    for log in logs:
        if log.network:
            nets.setdefault(log.network, []).append(log)
    ib_found = [log for log in logs if log.first("ib_devices")]
    if len(nets) > 1:
        ordered, text = _sides(nets)
        odd = [log for value, side in ordered if value == "Socket" for log in side]
        if not odd:
            odd = [log for _, side in ordered[1:] for log in side]
        with_ib = [log for log in odd if log.network == "Socket" and log.first("ib_devices")]
        found.append(
            Finding(
                KIND_NCCL_NETWORK,
                _ranks(odd),
                f"{_who(odd)} {_verb(odd, 'uses', 'use')} another NCCL network than the rest: "
                f"{text}"
                + (
                    f" ({_who(with_ib)} found InfiniBand devices and still "
                    f"{_verb(with_ib, 'uses', 'use')} sockets: NCCL_IB_DISABLE, NCCL_NET, "
                    "NCCL_IB_HCA?)"
                    if with_ib
                    else ""
                ),
                recipe=RECIPE_SOCKETS,
                severity=SEVERITY_ERROR,
                parts=_parts(ordered),
            )
        )
    sockets = nets.get("Socket", [])
    if sockets and ib_found and len(nets) == 1:
        found.append(
            Finding(
                KIND_NCCL_NETWORK,
                _ranks(sockets),
                f"{_who(sockets)} send over TCP sockets (Using network Socket) although NCCL "
                f"found InfiniBand devices ({', '.join(ib_found[0].first('ib_devices')[:4])}) "
                "on " + _who(ib_found) + ": check NCCL_IB_DISABLE, NCCL_NET, NCCL_IB_HCA",
                recipe=RECIPE_SOCKETS,
                severity=SEVERITY_WARNING,
            )
        )
    for net, side in nets.items():
        ifaces: dict[str, list[RankLog]] = {}
        for log in side:
            if log.interface:
                ifaces.setdefault(log.interface, []).append(log)
        if len(ifaces) > 1:
            ordered, text = _sides(ifaces)
            odd = [log for _, s in ordered[1:] for log in s]
            found.append(
                Finding(
                    KIND_NCCL_NETWORK,
                    _ranks(odd),
                    f"{_who(odd)} {_verb(odd, 'uses', 'use')} another network interface for "
                    f"NCCL ({net}) than the rest: {text}",
                    recipe=RECIPE_SOCKETS,
                    severity=SEVERITY_WARNING,
                    parts=_parts(ordered),
                )
            )
    return found


# ---- Versions ----------------------------------------------------------------------------


def _versions(logs: list[RankLog]) -> list[Finding]:
    found = []
    for attr, what, severity in (
        ("nccl_version", "NCCL", SEVERITY_ERROR),
        ("cuda_runtime", "CUDA runtime", SEVERITY_WARNING),
        ("cuda_driver", "CUDA driver", SEVERITY_WARNING),
    ):
        values: dict[str, list[RankLog]] = {}
        for log in logs:
            value = log.first(attr)
            if value:
                values.setdefault(value, []).append(log)
        if len(values) > 1:
            ordered, text = _sides(values)
            odd = [log for _, side in ordered[1:] for log in side]
            found.append(
                Finding(
                    KIND_NCCL_VERSION,
                    _ranks(odd),
                    f"the ranks run different {what} versions: {text}",
                    recipe=RECIPE_VERSION,
                    severity=severity,
                    parts=_parts(ordered),
                )
            )
    return found


# ---- Watchdog timeouts -------------------------------------------------------------------


def _work(fact: lp.TimeoutFact) -> str:
    size = f", {fact.numel_in} elements" if fact.numel_in is not None else ""
    seq = f" SeqNum {fact.seq}" if fact.seq is not None else ""
    return f"{fact.op or 'a collective'}{seq} of PG {fact.pg}{size}"


def _timeouts(logs: list[RankLog]) -> list[Finding]:
    timed: dict[tuple[str, int | None], list[tuple[RankLog, lp.TimeoutFact]]] = {}
    for log in logs:
        for fact in log.timeouts:
            timed.setdefault((fact.pg, fact.seq), []).append((log, fact))
    found = []
    for (pg, seq), entries in sorted(timed.items(), key=lambda i: (i[0][0], i[0][1] or 0)):
        waiting = [log for log, _ in entries]
        fact = entries[0][1]
        limit = f" after {fact.timeout_ms} ms" if fact.timeout_ms is not None else ""
        behind, unknown, ahead = [], [], []
        for log in logs:
            if log in waiting:
                continue
            enqueued = log.last_enqueued(pg)
            if enqueued is None or seq is None:
                unknown.append(log)
            elif enqueued < seq:
                behind.append((log, enqueued))
            else:
                ahead.append(log)
        detail = "; ".join(
            f"{log.label}: last enqueued {log.last_enqueued(pg)}, last completed "
            f"{log.last_completed(pg)}"
            for log in logs
            if log.last_enqueued(pg) is not None
        )[:2000]
        if behind:
            late = [log for log, _ in behind]
            lasts = sorted({enqueued for _, enqueued in behind})
            summary = (
                f"{_who(late)} never enqueued {_work(fact)} (last enqueued: "
                f"{', '.join(map(str, lasts))}), which {_who(waiting)} timed out in"
                f"{' (' + limit.strip() + ')' if limit else ''}: "
                f"{'that rank' if len(late) == 1 else 'those ranks'} did not reach the "
                "collective (stuck earlier, skipped it, or crashed)"
            )
            culprits = late
        else:
            everyone = not unknown
            summary = (
                f"{_who(waiting)} timed out in {_work(fact)}{limit} (NCCL watchdog)"
                + (
                    f"; {_who(ahead)} enqueued it too, so no rank is missing from it: the "
                    "collective itself did not complete (network, GPU, a peer on another node)"
                    if ahead and everyone
                    else ""
                )
                + (
                    f"; no watchdog or dump line from {_who(unknown)} says how far "
                    f"{'it' if len(unknown) == 1 else 'they'} got"
                    if unknown
                    else ""
                )
            )
            culprits = waiting
        found.append(
            Finding(
                KIND_NCCL_TIMEOUT,
                _ranks(culprits),
                summary,
                recipe=RECIPE_TIMEOUT,
                detail=detail,
                parts=(FindingPart(_ranks(waiting), f"timed out in {_work(fact)}"),)
                + ((FindingPart(_ranks(culprits), "never enqueued it"),) if behind else ()),
            )
        )
    stuck = [log for log in logs if any(e.kind == lp.ERR_HEARTBEAT for e in log.errors)]
    if stuck:
        found.append(
            Finding(
                KIND_NCCL_TIMEOUT,
                _ranks(stuck),
                f"the ProcessGroupNCCL watchdog of {_who(stuck)} itself stopped (heartbeat "
                "monitor): a CUDA/NCCL call or the GIL blocked it; raise "
                "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC only if the wait is legitimate",
                recipe=RECIPE_TIMEOUT,
            )
        )
    return found


# ---- Connections and gloo/c10d errors ----------------------------------------------------


def _by_error(
    logs: list[RankLog], kind: str
) -> dict[str | None, list[tuple[RankLog, lp.ErrorFact]]]:
    out: dict[str | None, list[tuple[RankLog, lp.ErrorFact]]] = {}
    for log in logs:
        seen = set()
        for error in log.errors:
            if error.kind == kind and error.target not in seen:
                seen.add(error.target)
                out.setdefault(error.target, []).append((log, error))
    return out


def _connections(logs: list[RankLog], silent: list[RankLog]) -> list[Finding]:
    found = []
    refused = _by_error(logs, lp.ERR_REFUSED)
    named = {id(log) for target, entries in refused.items() if target for log, _ in entries}
    for target, entries in refused.items():
        who = [log for log, _ in entries if target or id(log) not in named]
        if not who:
            continue  # "Call to connect returned Connection refused": said with its peer too
        to = f"to {target}" if target else "to a peer"
        found.append(
            Finding(
                KIND_CONNECTION,
                _ranks(who),
                f"{_who(who)} could not connect {to} ({entries[0][1].text[:160]}): nothing "
                "listened there yet or any more (the peer or the store's rank crashed, "
                "MASTER_ADDR/port wrong, a firewall)",
                recipe=RECIPE_CONNECTION,
            )
        )
    for target, entries in _by_error(logs, lp.ERR_CLOSED).items():
        who = [log for log, _ in entries]
        quiet = silent + [log for log in logs if log.rank is not None and not log.errors]
        found.append(
            Finding(
                KIND_CONNECTION,
                _ranks(who),
                f"{_who(who)} lost the connection to {target or 'a peer'} "
                f"({entries[0][1].text[:120]}): the process there ended first; its own "
                "log says why"
                + (
                    f" ({_who(quiet)} reported no error: "
                    f"{'did it' if len(quiet) == 1 else 'did they'} exit or crash first?)"
                    if quiet
                    else ""
                ),
                recipe=RECIPE_CONNECTION,
            )
        )
    for _, entries in _by_error(logs, lp.ERR_CLIENTS).items():
        who = [log for log, _ in entries]
        found.append(
            Finding(
                KIND_CONNECTION,
                _ranks(who),
                f"the store on {_who(who)} gave up waiting for the other ranks "
                f"({entries[0][1].text}): ranks never started or could not reach "
                "MASTER_ADDR:MASTER_PORT",
                recipe=RECIPE_CONNECTION,
            )
        )
    return found


def _dist_errors(logs: list[RankLog], silent: list[RankLog]) -> list[Finding]:
    found = []
    barrier = _by_error(logs, lp.ERR_BARRIER)
    for _, entries in barrier.items():
        named = sorted({r for _, e in entries for r in e.ranks})
        reporters = [log for log, _ in entries]
        found.append(
            Finding(
                KIND_DIST_ERROR,
                tuple(named),
                f"{'rank' if len(named) == 1 else 'ranks'} {format_ranks(named)} did not "
                f"reach monitored_barrier ({entries[0][1].text}), as {_who(reporters)} reports",
                recipe=RECIPE_OUTSIDE,
            )
        )
    for _, entries in _by_error(logs, lp.ERR_SIZE).items():
        who = [log for log, _ in entries]
        found.append(
            Finding(
                KIND_DIST_ERROR,
                _ranks(who),
                f"gloo on {_who(who)} received a message of another size than expected "
                f"({entries[0][1].text[:120]}): the ranks called a collective with different "
                "sizes or in a different order",
                recipe=RECIPE_MISMATCH,
                location=entries[0][1].target,
            )
        )
    gloo = [log for log, _ in next(iter(_by_error(logs, lp.ERR_GLOO_TIMEOUT).values()), [])]
    if gloo and not barrier:  # a monitored barrier's failure already names the rank
        text = next(e.text for e in gloo[0].errors if e.kind == lp.ERR_GLOO_TIMEOUT)
        quiet = silent + [log for log in logs if log not in gloo and log.rank is not None]
        found.append(
            Finding(
                KIND_DIST_ERROR,
                _ranks(quiet) if quiet else _ranks(gloo),
                f"{_who(gloo)} timed out in a gloo collective ({text})"
                + (f"; {_who(quiet)} did not: look there first" if quiet else ""),
                recipe=RECIPE_HANG if not quiet else RECIPE_OUTSIDE,
            )
        )
    return found


def _nccl_errors(logs: list[RankLog]) -> list[Finding]:
    found = []
    # NCCL errors torch raised, one finding per message (numbers aside); NCCL's own
    # "Last error:" line that follows goes with it as its detail.
    nccl: dict[str, tuple[str, list[RankLog]]] = {}
    last: dict[int, str] = {}
    for log in logs:
        for error in log.errors:
            if error.kind != lp.ERR_NCCL:
                continue
            if error.text.startswith("last error:"):
                last.setdefault(id(log), error.text)
                continue
            key = lp.normalised(error.text)
            entry = nccl.setdefault(key, (error.text, []))
            if log not in entry[1]:
                entry[1].append(log)
    if not nccl and last:  # only the last error is known
        for log in logs:
            if id(log) in last:
                key = lp.normalised(last[id(log)])
                entry = nccl.setdefault(key, (last[id(log)], []))
                entry[1].append(log)
        last = {}
    for text, who in list(nccl.values())[:4]:
        lasts = sorted({last[id(log)] for log in who if id(log) in last})
        found.append(
            Finding(
                KIND_DIST_ERROR,
                _ranks(who),
                f"{_who(who)}: {text}",
                recipe=RECIPE_WARNINGS,
                detail="; ".join(lasts[:3]),
            )
        )
    return found


# ---- WARN lines --------------------------------------------------------------------------


def _warnings(logs: list[RankLog]) -> list[Finding]:
    groups: dict[str, list[tuple[RankLog, lp.WarnGroup]]] = {}
    for log in logs:
        for proc in log.procs:
            for group in proc.warns.values():
                groups.setdefault(group.key, []).append((log, group))
    ordered = sorted(groups.values(), key=lambda e: (-len({id(log) for log, _ in e}), e[0][1].key))
    found = []
    for entries in ordered[:MAX_WARN_FINDINGS]:
        who = list({id(log): log for log, _ in entries}.values())
        sample = entries[0][1]
        count = sum(group.count for _, group in entries)
        chain = next((g.chain for _, g in entries if g.chain), ())
        code = chain[-1].rsplit(" ", 1)[-1] if chain else None
        result = f" -> {lp.NCCL_RESULTS.get(code, code)}" if code else ""
        found.append(
            Finding(
                KIND_NCCL_WARNING,
                _ranks(who),
                f"NCCL WARN on {_who(who)} ({count}x): {sample.text[:200]}{result}",
                location=sample.location,
                recipe=RECIPE_WARNINGS,
                severity=SEVERITY_WARNING,
                detail=" <- ".join(reversed(chain)) if chain else "",
            )
        )
    if len(ordered) > MAX_WARN_FINDINGS:
        rest = ordered[MAX_WARN_FINDINGS:]
        who = list({id(log): log for e in rest for log, _ in e}.values())
        found.append(
            Finding(
                KIND_NCCL_WARNING,
                _ranks(who),
                f"{len(rest)} more distinct NCCL WARN messages on {_who(who)}",
                recipe=RECIPE_WARNINGS,
                severity=SEVERITY_INFO,
            )
        )
    return found


def compare(logs: list[RankLog]) -> list[Finding]:
    """Findings across ranks, errors first, each naming its ranks and a recipe."""
    silent = [log for log in logs if not log.said_anything and log.rank is not None]
    logs = [log for log in logs if log.said_anything]
    found = (
        _timeouts(logs)
        + _init(logs)
        + _dist_errors(logs, silent)
        + _connections(logs, silent)
        + _nccl_errors(logs)
        + _network(logs)
        + _versions(logs)
        + _warnings(logs)
    )
    order = {SEVERITY_ERROR: 0, SEVERITY_WARNING: 1, SEVERITY_INFO: 2}
    return sorted(found, key=lambda f: order.get(f.severity, 3))


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
        lines.append(f"  {how}: {seq}{fact.op}{sizes}{limit}{ran} (PG {fact.pg})")
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
