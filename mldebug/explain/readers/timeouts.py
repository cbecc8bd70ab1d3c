"""Watchdog timeouts read as a person reads a fragment of them: who timed out, in which
collective, who is missing from the timeouts (and from the paste), whether the watchdog
itself was stuck ("ran for" many times its timeout), and ranks that time out at very
different SeqNums of one group.

It reads over what `mldebug.nccl` parsed of the same text (its `RankLog`s); the rule "the
rank missing from the timeouts is the suspect" is this module's, over that output.
"""

from __future__ import annotations

from collections.abc import Iterable

from mldebug.explain.finding import (
    KIND_SEQ_SPREAD,
    KIND_TIMEOUT_SUSPECT,
    KIND_WATCHDOG_STUCK,
    Explained,
)
from mldebug.explain.text import Line, ranks_seen
from mldebug.nccl.logfacts import TimeoutFact
from mldebug.nccl.ranklog import RankLog
from mldebug.ranges import format_ranks

RECIPE_TIMEOUT = "nccl-watchdog-timeout"
RECIPE_MISMATCH = "mismatched-collectives"
STUCK_FACTOR = 3  # "ran for" this many times the timeout: the watchdog was late, not the op
SPREAD = 2  # SeqNums this far apart in one group are not one late collective


def _ranks_word(ranks: Iterable[int]) -> str:
    ranks = list(ranks)
    return f"{'rank' if len(ranks) == 1 else 'ranks'} {format_ranks(ranks)}"


def _world(logs: list[RankLog], lines: list[Line]) -> tuple[int | None, bool]:
    """The world size if a line says it (nranks of the largest communicator), else
    (at least max rank + 1, False)."""
    sizes = [c.nranks for log in logs for c in log.comms]
    if sizes:
        return max(sizes), True
    known = [log.rank for log in logs if log.rank is not None] + list(ranks_seen(lines))
    return (max(known) + 1 if known else None), False


def _timeout_lines(lines: list[Line]) -> list[Line]:
    return [
        line
        for line in lines
        if "Watchdog caught" in line.text
        or "timed out in blocking wait" in line.text
        or "Operation timed out after" in line.text  # torch 2.15's nccl2
        or "last enqueued" in line.text
        or (" nranks " in line.text and "NCCL INFO" in line.text)
    ]


def _bars(lines: list[Line]) -> list[Line]:
    return [line for line in lines if line.progress]


def read(lines: list[Line], logs: list[RankLog]) -> list[Explained]:
    found: list[Explained] = []
    timed: dict[tuple[str, int | None], list[tuple[RankLog, TimeoutFact]]] = {}
    for log in logs:
        for fact in log.timeouts:
            timed.setdefault((fact.pg, fact.seq), []).append((log, fact))
    if not timed:
        return found
    cited = _timeout_lines(lines)
    world, exact = _world(logs, lines)
    seen = ranks_seen(lines) | {log.rank for log in logs if log.rank is not None}
    # Ranks at very different SeqNums of one group.
    by_pg: dict[str, dict[int, list[RankLog]]] = {}
    for (pg, seq), entries in timed.items():
        if seq is not None:
            by_pg.setdefault(pg, {}).setdefault(seq, []).extend(log for log, _ in entries)
    for pg, seqs in by_pg.items():
        if len(seqs) > 1 and max(seqs) - min(seqs) >= SPREAD:
            low = min(seqs)
            behind = [log.rank for log in seqs[low] if log.rank is not None]
            sizes = {
                fact.numel_in
                for (g, _), entries in timed.items()
                if g == pg
                for _, fact in entries
                if fact.numel_in is not None
            }
            ahead = sorted(
                {
                    log.rank
                    for s, logs_ in seqs.items()
                    if s != low
                    for log in logs_
                    if log.rank is not None
                }
            )
            found.append(
                Explained(
                    KIND_SEQ_SPREAD,
                    f"{_ranks_word(behind)} timed out at SeqNum {low} of PG {pg} while "
                    f"{_ranks_word(ahead)} timed out at SeqNum {max(seqs)}: "
                    f"{max(seqs) - low} collectives apart, so they are not waiting for one late "
                    "collective; the ranks issued different numbers of collectives (a rank "
                    "skipped or added some: a data-dependent branch, uneven batches, a "
                    "rank-only evaluation or logging call)",
                    0.9 if len(sizes) > 1 else 0.8,
                    RECIPE_MISMATCH,
                    fix="find the collective some ranks call and others do not: "
                    "TORCH_DISTRIBUTED_DEBUG=DETAIL names it at the first mismatch; the Flight "
                    "Recorder (TORCH_NCCL_TRACE_BUFFER_SIZE) shows each rank's last ops",
                    ranks=tuple(sorted(behind)),
                ).cited(cited)
            )
    # A watchdog that reported far later than its timeout.
    late = [
        (log, fact, fact.ran_ms, fact.timeout_ms)
        for entries in timed.values()
        for log, fact in entries
        if fact.ran_ms and fact.timeout_ms and fact.ran_ms >= STUCK_FACTOR * fact.timeout_ms
    ]
    if late:
        log, fact, ran, limit = max(late, key=lambda item: (item[2] or 0) / (item[3] or 1))
        ran, limit = ran or 0, limit or 1
        ranks = sorted({lg.rank for lg, *_ in late if lg.rank is not None})
        found.append(
            Explained(
                KIND_WATCHDOG_STUCK,
                f"the watchdog of {_ranks_word(ranks) if ranks else 'a rank'} reported SeqNum "
                f"{fact.seq} after {ran:,} ms for a {limit:,} ms timeout "
                f"({ran / limit:.0f}x): the watchdog thread itself was "
                "blocked (a CUDA call that never returned, the GIL held, the process stopped), "
                "so the hang began long before this line",
                0.78,
                RECIPE_TIMEOUT,
                fix="take stacks while it hangs (mldebug dump, py-spy dump --native); look for a "
                "rank stuck in a CUDA call or in C code holding the GIL",
                ranks=tuple(ranks),
            ).cited(cited)
        )
    # The ranks missing from the timeouts of the collective most ranks timed out in.
    (pg, seq), entries = max(timed.items(), key=lambda item: len(item[1]))
    waiting = sorted({log.rank for log, _ in entries if log.rank is not None})
    fact = entries[0][1]
    if not waiting or any(f.kind == KIND_SEQ_SPREAD for f in found):
        return found
    # A rank that timed out in another SeqNum of the group is not missing from it.
    waiting = sorted(
        set(waiting)
        | {log.rank for log in logs for t in log.timeouts if t.pg == pg and log.rank is not None}
    )
    said = {log.rank: log for log in logs if log.rank is not None}
    enqueued_behind = [
        r
        for r, log in said.items()
        if r not in waiting
        and seq is not None
        and (enqueued := log.last_enqueued(pg)) is not None
        and enqueued < seq
    ]
    if enqueued_behind:
        return found  # mldebug.nccl's own finding names them, with their last SeqNum
    universe = set(range(world)) if world else set()
    missing = sorted(universe - set(waiting))
    if not missing:
        return found
    absent = [r for r in missing if r not in seen]
    present = [r for r in missing if r in seen]
    bars = _bars(lines)
    work = (
        f"{fact.op or 'a collective'}"
        + (f" SeqNum {seq}" if seq is not None else "")
        + f" of PG {pg}"
    )
    of = f"of {world}" if exact else f"of at least {world}"
    summary = f"{_ranks_word(waiting)} {of} timed out in {work}"
    if fact.timeout_ms:
        summary += f" (after {fact.timeout_ms:,} ms)"
    parts = []
    if absent:
        parts.append(
            f"{_ranks_word(absent)} {'is' if len(absent) == 1 else 'are'} not in the paste: if "
            f"{'it' if len(absent) == 1 else 'they'} printed nothing, "
            f"{'it' if len(absent) == 1 else 'they'} never reached that collective"
        )
    if present:
        parts.append(
            f"{_ranks_word(present)} printed lines but no timeout: still busy before the collective"
        )
    if bars:
        label = bars[-1].text.split("%", 1)[0].rsplit(" ", 1)[0].strip(" :|") or "a progress bar"
        parts.append(
            f'a progress bar ("{label[:60]}") ran meanwhile: the rank drawing it (often rank 0 '
            "alone: tokenizing, mapping a dataset, evaluating) was still working while the "
            "others waited"
        )
    suspects = tuple(missing)
    found.append(
        Explained(
            KIND_TIMEOUT_SUSPECT,
            summary + "; " + "; ".join(parts),
            (0.86 if (bars or present) else 0.8) if len(absent) <= max(1, len(waiting)) else 0.55,
            RECIPE_TIMEOUT,
            fix="look at what the missing rank was doing at that time (its own log, mldebug "
            "dump while it hangs); work done by one rank only (tokenizing, saving, evaluating) "
            "belongs before the first collective or behind a barrier with a longer timeout "
            "(init_process_group(timeout=...))",
            ranks=suspects,
            note=("the world size is not in the paste: " if not exact else "")
            + f"only {_ranks_word(waiting)}'s timeouts are in it",
        ).cited(cited + bars[-1:])
    )
    return found
