"""Findings from what went wrong at run time, across ranks: watchdog timeouts compared by
sequence number (the rank whose last enqueued work is behind the one the others timed out
in), connections refused or closed and the store's missing clients, gloo's and c10d's
errors, and the NCCL errors torch raised. Pure functions over `RankLog`s.
"""

from __future__ import annotations

import mldebug.ledger.compare as ledger
import mldebug.ledger.rules as rules
from mldebug.ledger.verdicts import VERDICT_BEHIND, VERDICT_HANG, ledger_finding
from mldebug.model import (
    KIND_CONNECTION,
    KIND_DIST_ERROR,
    KIND_NCCL_TIMEOUT,
    SOURCE_LOGS,
    SOURCE_WATCHDOG,
    CollectiveRef,
    Finding,
    FindingPart,
)
from mldebug.nccl import logfacts as lp
from mldebug.nccl.ranklog import RankLog, name_ranks, ranks_in
from mldebug.wording import ranks_text

RECIPE_TIMEOUT = "nccl-watchdog-timeout"
RECIPE_WARNINGS = "nccl-warnings"
RECIPE_CONNECTION = "connection-refused"
RECIPE_HANG = "collective-hang"
RECIPE_MISMATCH = "mismatched-collectives"
RECIPE_OUTSIDE = "rank-outside-collective"


# ---- Watchdog timeouts -------------------------------------------------------------------


def _work(fact: lp.TimeoutFact) -> str:
    size = f", {fact.numel_in} elements" if fact.numel_in is not None else ""
    seq = f" SeqNum {fact.seq}" if fact.seq is not None else ""
    return f"{fact.op or 'a collective'}{seq} of PG {fact.pg}{size}"


def _group(pg: str) -> str:
    """The ledger's name of a watchdog's PG: PG ID 0 is the default group (torch numbers
    its process groups from 0 in creation order, init_process_group's first)."""
    return rules.DEFAULT_GROUP if pg == "0" else pg


def _verdict(
    pg: str, seq: int, fact: lp.TimeoutFact, waiting: list[RankLog], late: list[RankLog]
) -> ledger.GroupVerdict | None:
    """The ledger's verdict on the watchdog's counts (None when a log has no rank: the
    ledger speaks of ranks). Every log is a member: the hang needs them all."""
    progress: dict[int, ledger.RankProgress] = {}
    for log in waiting:
        if log.rank is None:
            return None
        call = ledger.Call(seq, rules.op_name(fact.op or "?"))
        progress[log.rank] = ledger.RankProgress(log.rank, seq, log.last_completed(pg), {seq: call})
    for log in late:
        if log.rank is None:
            return None
        progress[log.rank] = ledger.RankProgress(
            log.rank, log.last_enqueued(pg) or 0, log.last_completed(pg)
        )
    return ledger.compare_group(_group(pg), progress, size=len(progress))


def _behind_words(
    pg: str, seq: int, fact: lp.TimeoutFact, waiting: list[RankLog], late: list[RankLog]
) -> str | None:
    """The ledger's verdict on the ranks that never enqueued work `seq`, in its words."""
    verdict = _verdict(pg, seq, fact, waiting, late)
    if verdict is None or not verdict.behind:
        return None
    return "; ".join(b.text for b in verdict.behind)


def timeouts(logs: list[RankLog]) -> list[Finding]:
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
        parts = (FindingPart(ranks_in(waiting), f"timed out in {_work(fact)}"),)
        if behind:
            late = [log for log, _ in behind]
            lasts = sorted({enqueued for _, enqueued in behind})
            words = _behind_words(pg, seq, fact, waiting, late) if seq is not None else None
            summary = (
                (
                    f"{words}; {name_ranks(waiting)} timed out in it ({_work(fact)}{limit}; "
                    f"last enqueued: {', '.join(map(str, lasts))}): "
                    f"{'that rank' if len(late) == 1 else 'those ranks'} did not reach the "
                    "collective (stuck earlier, skipped it, or crashed)"
                )
                if words is not None
                else (
                    f"{name_ranks(late)} never enqueued {_work(fact)} (last enqueued: "
                    f"{', '.join(map(str, lasts))}), which {name_ranks(waiting)} timed out in"
                    f"{' (' + limit.strip() + ')' if limit else ''}: "
                    f"{'that rank' if len(late) == 1 else 'those ranks'} did not reach the "
                    "collective (stuck earlier, skipped it, or crashed)"
                )
            )
            found.append(
                ledger_finding(
                    VERDICT_BEHIND,
                    ranks_in(late),
                    summary,
                    source=SOURCE_WATCHDOG,
                    detail=detail,
                    parts=parts + (FindingPart(ranks_in(late), "never enqueued it"),),
                    group=_group(pg),
                    seq=seq,
                    op=fact.op,
                    waiting=ranks_in(waiting),
                )
            )
            continue
        everyone = not unknown
        verdict = (
            _verdict(pg, seq, fact, waiting, [])
            if everyone and not ahead and len(waiting) > 1 and seq is not None
            else None
        )
        if verdict is not None and verdict.hang is not None:
            summary = (
                f"{verdict.hang} ({name_ranks(waiting)} timed out in {_work(fact)}{limit}, "
                "NCCL watchdog: the network, a GPU, a peer on another node)"
            )
            found.append(
                ledger_finding(
                    VERDICT_HANG,
                    ranks_in(waiting),
                    summary,
                    source=SOURCE_WATCHDOG,
                    detail=detail,
                    parts=parts,
                    group=_group(pg),
                    seq=seq,
                    op=fact.op,
                    waiting=ranks_in(waiting),
                )
            )
            continue
        summary = (
            f"{name_ranks(waiting)} timed out in {_work(fact)}{limit} (NCCL watchdog)"
            + (
                f"; {name_ranks(ahead)} enqueued it too, so no rank is missing from it: the "
                "collective itself did not complete (network, GPU, a peer on another node)"
                if ahead and everyone
                else ""
            )
            + (
                "; every rank timed out in it, none is missing from it: the collective "
                "itself did not complete (network, GPU, a peer on another node)"
                if not ahead and everyone and len(waiting) > 1 and seq is not None
                else ""
            )
            + (
                f"; no watchdog or dump line from {name_ranks(unknown)} says how far "
                f"{'it' if len(unknown) == 1 else 'they'} got"
                if unknown
                else ""
            )
        )
        found.append(
            Finding(
                KIND_NCCL_TIMEOUT,
                ranks_in(waiting),
                summary,
                recipe=RECIPE_TIMEOUT,
                detail=detail,
                parts=parts,
                waiting=ranks_in(waiting),
                collective=CollectiveRef(_group(pg), seq, rules.op_name(fact.op or "?")),
                sources=(SOURCE_WATCHDOG,),
            )
        )
    stuck = [log for log in logs if any(e.kind == lp.ERR_HEARTBEAT for e in log.errors)]
    if stuck:
        found.append(
            Finding(
                KIND_NCCL_TIMEOUT,
                ranks_in(stuck),
                f"the ProcessGroupNCCL watchdog of {name_ranks(stuck)} itself stopped (heartbeat "
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


def _reported(
    logs: list[RankLog], kind: str
) -> list[tuple[str | None, list[RankLog], lp.ErrorFact]]:
    """Per distinct error of `kind`: its target, the logs that report it, the first report."""
    return [
        (target, [log for log, _ in entries], entries[0][1])
        for target, entries in _by_error(logs, kind).items()
    ]


def connections(logs: list[RankLog], silent: list[RankLog]) -> list[Finding]:
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
                ranks_in(who),
                f"{name_ranks(who)} could not connect {to} ({entries[0][1].text[:160]}): nothing "
                "listened there yet or any more (the peer or the store's rank crashed, "
                "MASTER_ADDR/port wrong, a firewall)",
                recipe=RECIPE_CONNECTION,
            )
        )
    for target, who, first in _reported(logs, lp.ERR_CLOSED):
        quiet = silent + [log for log in logs if log.rank is not None and not log.errors]
        found.append(
            Finding(
                KIND_CONNECTION,
                ranks_in(who),
                f"{name_ranks(who)} lost the connection to {target or 'a peer'} "
                f"({first.text[:120]}): the process there ended first; its own "
                "log says why"
                + (
                    f" ({name_ranks(quiet)} reported no error: "
                    f"{'did it' if len(quiet) == 1 else 'did they'} exit or crash first?)"
                    if quiet
                    else ""
                ),
                recipe=RECIPE_CONNECTION,
            )
        )
    for _, who, first in _reported(logs, lp.ERR_CLIENTS):
        found.append(
            Finding(
                KIND_CONNECTION,
                ranks_in(who),
                f"the store on {name_ranks(who)} gave up waiting for the other ranks "
                f"({first.text}): ranks never started or could not reach "
                "MASTER_ADDR:MASTER_PORT",
                recipe=RECIPE_CONNECTION,
            )
        )
    return found


def dist_errors(logs: list[RankLog], silent: list[RankLog]) -> list[Finding]:
    found = []
    barrier = _by_error(logs, lp.ERR_BARRIER)
    for _, entries in barrier.items():
        named = sorted({r for _, e in entries for r in e.ranks})
        reporters = [log for log, _ in entries]
        found.append(
            Finding(
                KIND_DIST_ERROR,
                tuple(named),
                f"{ranks_text(named)} did not "
                f"reach monitored_barrier ({entries[0][1].text}), as {name_ranks(reporters)} reports",
                recipe=RECIPE_OUTSIDE,
                waiting=ranks_in(reporters),
                sources=(SOURCE_LOGS,),
            )
        )
    for _, who, first in _reported(logs, lp.ERR_SIZE):
        found.append(
            Finding(
                KIND_DIST_ERROR,
                ranks_in(who),
                f"gloo on {name_ranks(who)} received a message of another size than expected "
                f"({first.text[:120]}): the ranks called a collective with different "
                "sizes or in a different order",
                recipe=RECIPE_MISMATCH,
                location=first.target,
            )
        )
    gloo = [log for log, _ in next(iter(_by_error(logs, lp.ERR_GLOO_TIMEOUT).values()), [])]
    if gloo and not barrier:  # a monitored barrier's failure already names the rank
        text = next(e.text for e in gloo[0].errors if e.kind == lp.ERR_GLOO_TIMEOUT)
        quiet = silent + [log for log in logs if log not in gloo and log.rank is not None]
        found.append(
            Finding(
                KIND_DIST_ERROR,
                ranks_in(quiet) if quiet else ranks_in(gloo),
                f"{name_ranks(gloo)} timed out in a gloo collective ({text})"
                + (f"; {name_ranks(quiet)} did not: look there first" if quiet else ""),
                recipe=RECIPE_HANG if not quiet else RECIPE_OUTSIDE,
                waiting=ranks_in(gloo) if quiet else (),
                sources=(SOURCE_LOGS,),
            )
        )
    return found


def nccl_errors(logs: list[RankLog]) -> list[Finding]:
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
                ranks_in(who),
                f"{name_ranks(who)}: {text}",
                recipe=RECIPE_WARNINGS,
                detail="; ".join(lasts[:3]),
                facts=(("error", "nccl"),) + tuple(("last_error", t[:200]) for t in lasts[:1]),
                sources=(SOURCE_LOGS,),
            )
        )
    return found
