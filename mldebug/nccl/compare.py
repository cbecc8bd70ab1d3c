"""From what each process said (`logparse.ProcLog`) to ranks, and from ranks to findings.

A rank may speak in several files (its NCCL_DEBUG_FILE and its stderr): its processes are
put together by rank, or by host and pid where no rank is known. Then the ranks are set
side by side, the way a person greps a hundred logs for the odd one out: who never reached
Init COMPLETE, who is on sockets while the others use InfiniBand, who runs another NCCL,
whose last enqueued collective is behind the one the others timed out in, who could not
connect to whom, and which WARN lines the ranks share. Pure functions, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable

from mldebug.model import (
    KIND_NCCL_INIT,
    KIND_NCCL_NETWORK,
    KIND_NCCL_VERSION,
    KIND_NCCL_WARNING,
    SEVERITY_ERROR,
    SEVERITY_INFO,
    SEVERITY_WARNING,
    Finding,
)
from mldebug.nccl import compare_errors as errors
from mldebug.nccl import logfacts as lp
from mldebug.nccl.ranklog import RankLog, name_ranks, parts_of, ranks_in, sides, verb

RECIPE_INIT = "nccl-init-failure"
RECIPE_SOCKETS = "nccl-sockets-instead-of-ib"
RECIPE_VERSION = "nccl-version-mismatch"
RECIPE_WARNINGS = "nccl-warnings"
MAX_WARN_FINDINGS = 8  # distinct WARN messages reported; the rest are counted


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
                ranks_in(started_only),
                f"{name_ranks(started_only)} started NCCL communicator init (nranks {comm.nranks}) "
                "and never reached Init COMPLETE"
                + (f", which {name_ranks(done)} reached" if done else "")
                + ": a peer never joined, or the bootstrap/network between them fails "
                "(NCCL_SOCKET_IFNAME, firewall)",
                recipe=RECIPE_INIT,
                detail="; ".join(
                    f"{log.label}: {', '.join(_stuck_in(log))}" for log in started_only[:8]
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
                    ranks_in(absent),
                    f"{name_ranks(absent)} never began NCCL communicator {comm_id} "
                    f"(nranks {sizes[comm_id]}) that {name_ranks(present)} initialised",
                    recipe=RECIPE_INIT,
                )
            )
            break
    return found


def _stuck_in(log: RankLog) -> list[str]:
    """The files where the rank's init started and did not complete."""
    return [
        p.source for p in log.procs if any(c.started and not c.completed for c in p.comms.values())
    ][:3]


# ---- Network -----------------------------------------------------------------------------


def _by(logs: list[RankLog], value_of: Callable[[RankLog], str | None]) -> dict[str, list[RankLog]]:
    """The ranks grouped by one fact of theirs (ranks without it left out)."""
    groups: dict[str, list[RankLog]] = {}
    for log in logs:
        value = value_of(log)
        if value:
            groups.setdefault(value, []).append(log)
    return groups


def _not_most(ordered: list[tuple[str, list[RankLog]]]) -> list[RankLog]:
    """The logs of every value but the most common (`ordered` as ranklog.sides gives it)."""
    return [log for _, side in ordered[1:] for log in side]


def _odd_out(
    kind: str,
    odd: list[RankLog],
    summary: str,
    ordered: list[tuple[str, list[RankLog]]],
    *,
    recipe: str,
    severity: str,
) -> Finding:
    """A finding on the ranks that differ from the rest, each value a part of it."""
    return Finding(
        kind, ranks_in(odd), summary, recipe=recipe, severity=severity, parts=parts_of(ordered)
    )


def _network(logs: list[RankLog]) -> list[Finding]:
    found = []
    nets = _by(logs, lambda log: log.network)
    ib_found = [log for log in logs if log.first("ib_devices")]
    if len(nets) > 1:
        ordered, text = sides(nets)
        odd = [log for value, side in ordered if value == "Socket" for log in side]
        if not odd:
            odd = _not_most(ordered)
        with_ib = [log for log in odd if log.network == "Socket" and log.first("ib_devices")]
        found.append(
            Finding(
                KIND_NCCL_NETWORK,
                ranks_in(odd),
                f"{name_ranks(odd)} {verb(odd, 'uses', 'use')} another NCCL network than the rest: "
                f"{text}"
                + (
                    f" ({name_ranks(with_ib)} found InfiniBand devices and still "
                    f"{verb(with_ib, 'uses', 'use')} sockets: NCCL_IB_DISABLE, NCCL_NET, "
                    "NCCL_IB_HCA?)"
                    if with_ib
                    else ""
                ),
                recipe=RECIPE_SOCKETS,
                severity=SEVERITY_ERROR,
                parts=parts_of(ordered),
            )
        )
    sockets = nets.get("Socket", [])
    if sockets and ib_found and len(nets) == 1:
        found.append(
            Finding(
                KIND_NCCL_NETWORK,
                ranks_in(sockets),
                f"{name_ranks(sockets)} send over TCP sockets (Using network Socket) although NCCL "
                f"found InfiniBand devices ({', '.join(ib_found[0].first('ib_devices')[:4])}) "
                "on " + name_ranks(ib_found) + ": check NCCL_IB_DISABLE, NCCL_NET, NCCL_IB_HCA",
                recipe=RECIPE_SOCKETS,
                severity=SEVERITY_WARNING,
            )
        )
    for net, side in nets.items():
        ifaces = _by(side, lambda log: log.interface)
        if len(ifaces) > 1:
            ordered, text = sides(ifaces)
            odd = _not_most(ordered)
            said = (
                f"{name_ranks(odd)} {verb(odd, 'uses', 'use')} another network interface for "
                f"NCCL ({net}) than the rest: {text}"
            )
            found.append(
                _odd_out(
                    KIND_NCCL_NETWORK,
                    odd,
                    said,
                    ordered,
                    recipe=RECIPE_SOCKETS,
                    severity=SEVERITY_WARNING,
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
        # mypy infers no type for a lambda with a default (the loop's attr, bound now)
        values = _by(logs, lambda log, attr=attr: log.first(attr))  # type: ignore[misc]
        if len(values) > 1:
            ordered, text = sides(values)
            odd = _not_most(ordered)
            if len(ordered[0][1]) == len(ordered[1][1]):  # a tie: no side is the odd one
                odd = [log for _, side in ordered for log in side]
            said = f"the ranks run different {what} versions: {text}"
            found.append(
                _odd_out(
                    KIND_NCCL_VERSION, odd, said, ordered, recipe=RECIPE_VERSION, severity=severity
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
                ranks_in(who),
                f"NCCL WARN on {name_ranks(who)} ({count}x): {sample.text[:200]}{result}",
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
                ranks_in(who),
                f"{len(rest)} more distinct NCCL WARN messages on {name_ranks(who)}",
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
        errors.timeouts(logs)
        + _init(logs)
        + errors.dist_errors(logs, silent)
        + errors.connections(logs, silent)
        + errors.nccl_errors(logs)
        + _network(logs)
        + _versions(logs)
        + _warnings(logs)
    )
    order = {SEVERITY_ERROR: 0, SEVERITY_WARNING: 1, SEVERITY_INFO: 2}
    return sorted(found, key=lambda f: order.get(f.severity, 3))
