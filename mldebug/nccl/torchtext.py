"""torch.distributed's own text: the ProcessGroupNCCL watchdog of every era (WorkNCCL(...),
last enqueued / last completed work, dump signals, the heartbeat monitor, blocking wait),
torch 2.15's nccl2 backend ("[TC][rank=R][name=PG] Operation timed out after N ms", its
exception without WorkNCCL(...)),
gloo's errors (recv/send timeouts, connection closed by peer, enforce fail, monitored
barrier) and the TCPStore's (clients joined, failed to connect). One line at a time, into a
process's facts.
"""

from __future__ import annotations

import re

from mldebug.nccl import logformats as f
from mldebug.nccl.logfacts import (
    ERR_BARRIER,
    ERR_CLIENTS,
    ERR_CLOSED,
    ERR_GLOO_TIMEOUT,
    ERR_HEARTBEAT,
    ERR_NCCL,
    ERR_REFUSED,
    ERR_SIZE,
    MAX_TIMEOUTS,
    RANK_BY_PG,
    ProcLog,
    TimeoutFact,
    add_error,
    clip,
    to_int,
)


def read_torch(proc: ProcLog, body: str) -> bool:
    """Read one line of torch/gloo/c10d text into `proc`; a line that said something counts
    in `torch_lines`. True when the line is NCCL's "Last error:", whose text comes next."""
    before = _said(proc)
    last_error = _facts(proc, body)
    if _said(proc) != before:
        proc.torch_lines += 1
    return last_error


def _said(proc: ProcLog) -> tuple:
    return (
        sum(e.count for e in proc.errors.values()),
        len(proc.timeouts),
        dict(proc.last_enqueued),
        dict(proc.failed_seq),
        proc.dump_from,
    )


def _facts(proc: ProcLog, body: str) -> bool:
    pg = "0"
    tag = f.PG.search(body)
    if tag:
        pg = tag.group("pg") or "0"
        rank = to_int(tag.group("rank") or tag.group("rank2"))
        if rank is not None and pg == "0":
            proc.claim_rank(rank, RANK_BY_PG)
    if "[TC]" in body or f.NCCL2_TIMEOUT in body:
        _nccl2(proc, body)
    if "WorkNCCL(" in body and (
        "atchdog caught" in body or "blocking wait" in body or "aught collective" in body
    ):
        _timeout(proc, body, "blocking wait" in body)
    last = f.LAST.search(body) if "ast enqueued" in body else None
    if last:
        proc.last_enqueued[pg] = int(last.group("enq")[:12])
        proc.last_completed[pg] = int(last.group("done")[:12])
    failed = f.FAILED_AT.search(body)
    if failed:
        proc.failed_seq[pg] = int(failed.group("seq")[:12])
    if "dump signal" in body:
        source = f.DUMP_FROM.search(body)
        if source and source.group("rank"):
            proc.dump_from = int(source.group("rank")[:8])
    stuck = f.STUCK.search(body)
    if stuck:
        add_error(proc, ERR_HEARTBEAT, body)
    if "Timed out" in body:
        gloo = f.GLOO_TIMEOUT.search(body)
        if gloo:
            add_error(proc, ERR_GLOO_TIMEOUT, gloo.group(0))
        clients = f.CLIENTS.search(body)
        if clients:
            add_error(proc, ERR_CLIENTS, clients.group(0))
    if "onnection" in body:
        closed = f.CLOSED.search(body)
        if closed:
            target = closed.group("host")  # not the port: each pair of ranks has its own
            add_error(proc, ERR_CLOSED, closed.group(0), target)
    if "onnect" in body and not ("onnection closed" in body or "onnection reset" in body):
        to = (
            f.CONNECT_TO.search(body)
            if ("refused" in body or "failed" in body or "timed out" in body)
            else None
        )
        if to or "refused" in body:
            target = None
            if to:
                host = to.group("h1") or to.group("h2") or to.group("h3")
                port = to.group("p1") or to.group("p2") or to.group("p3")
                target = f"{host}:{port}"
            add_error(proc, ERR_REFUSED, body, target)
    if "nforce fail" in body and "Unable to find address" not in body:  # that one: the interface
        enforce = f.ENFORCE.search(body)
        if enforce:
            add_error(proc, ERR_SIZE, enforce.group("what"), enforce.group("where"))
    if "onitoredBarrier" in body:
        barrier = f.BARRIER.search(body)
        if barrier:
            named = tuple(
                int(r) for r in re.findall(r"\d+", barrier.group("ranks"))[:64] if len(r) < 8
            )
            add_error(proc, ERR_BARRIER, barrier.group(0), None, named)
    if "NCCL error" in body:
        nccl = f.NCCL_ERROR.search(body)
        if nccl:
            if nccl.group("v"):
                proc.nccl_version = proc.nccl_version or nccl.group("v")
            add_error(proc, ERR_NCCL, nccl.group(0))
    if "communicator was aborted" in body:
        add_error(proc, ERR_NCCL, body)
    return body.rstrip().endswith("Last error:")


def _nccl2(proc: ProcLog, body: str) -> None:
    """torch 2.15's nccl2 backend: no SeqNum, no op; the group's name, how long it ran."""
    tag = f.TC.search(body)
    pg = (tag.group("pg") if tag else None) or "0"
    rank = to_int(tag.group("rank")) if tag else None
    if rank is not None and pg == "0":  # the default group's rank is the global rank
        proc.claim_rank(rank, RANK_BY_PG)
    ran = f.TC_TIMED_OUT.search(body)
    if ran is None and f.NCCL2_TIMEOUT not in body:
        return
    fact = TimeoutFact(pg=pg, seq=None, op=None, ran_ms=to_int(ran.group("ms")) if ran else None)
    for known in proc.timeouts:  # the log line, then the exception: one timeout
        if known.seq is None and known.op is None and (known.pg == pg or not tag):
            known.ran_ms = known.ran_ms or fact.ran_ms
            return
    if len(proc.timeouts) < MAX_TIMEOUTS:
        proc.timeouts.append(fact)


def _timeout(proc: ProcLog, body: str, blocking: bool) -> None:
    work = f.WORK.search(body)
    if not work:
        return
    fields = dict(f.FIELD.findall(work.group("fields")))
    ran = f.RAN_FOR.search(body)
    tag = f.PG.search(body)
    pg = tag.group("pg") if tag and tag.group("pg") else "0"
    fact = TimeoutFact(
        pg=pg,
        seq=to_int(fields.get("SeqNum")),
        op=clip(fields["OpType"])[:40] if "OpType" in fields else None,
        numel_in=to_int(fields.get("NumelIn")),
        numel_out=to_int(fields.get("NumelOut")),
        timeout_ms=to_int(fields.get("Timeout(ms)")),
        ran_ms=to_int(ran.group(1)) if ran else None,
        blocking=blocking,
    )
    for known in proc.timeouts:  # torch repeats it (terminated with..., what():)
        if (known.pg, known.seq, known.op) == (fact.pg, fact.seq, fact.op):
            known.ran_ms = known.ran_ms or fact.ran_ms
            return
    if len(proc.timeouts) < MAX_TIMEOUTS:
        proc.timeouts.append(fact)
