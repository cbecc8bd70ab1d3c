"""NCCL's own lines (`host:pid:tid [dev] NCCL INFO|WARN ...`), one at a time, into a
process's facts: versions, the network and its interfaces, communicators from Init START to
Init COMPLETE and Abort, WARN messages grouped with the `file.cc:L -> N` unwinding after
them.
"""

from __future__ import annotations

import re

from mldebug.nccl import logformats as f
from mldebug.nccl.logfacts import (
    MAX_CHAIN,
    MAX_COMMS,
    MAX_WARN_GROUPS,
    RANK_BY_COMM,
    Comm,
    ProcLog,
    WarnGroup,
    clip,
    normalised,
    to_int,
)
from mldebug.nccl.torchtext import read_torch


def read_nccl(proc: ProcLog, match: re.Match) -> None:
    msg = match.group("msg")
    dev = to_int(match.group("dev"))
    if dev is not None and proc.device is None:
        proc.device = dev
    if match.group("level") == "WARN":
        _warn(proc, match, msg)
        return
    if ".cc:" in msg and " -> " in msg:
        unwind = f.UNWIND.search(msg)
        if unwind:
            proc.last_error_code = unwind.group("code")
            warn = proc.last_warn
            if warn is not None and len(warn.chain) < MAX_CHAIN:
                warn.chain += (unwind.group(0),)
            return
    if "- Init " in msg or "- Abort " in msg:
        _comm(proc, msg)
        return
    if "NCCL version" in msg:
        read_version(proc, msg)
    elif msg.startswith("cudaDriverVersion"):
        driver = f.DRIVER.match(msg)
        if driver:
            value = int(driver.group("v")[:9])
            proc.cuda_driver = f"{value // 1000}.{value % 1000 // 10}"
    elif msg.startswith("NET/IB"):
        ib = f.NET_IB.match(msg)
        if ib and ib.group("none"):
            proc.ib_devices = ()
        elif ib:
            devices = tuple(m.group("name") for m in f.IFACE.finditer(ib.group("devs") or ""))
            proc.ib_devices = devices[:16]
            proc.ib_oob = ib.group("oob") or proc.ib_oob
    elif msg.startswith("NET/Socket"):
        sock = f.NET_SOCKET.match(msg)
        if sock:
            proc.socket_ifs = tuple(m.group("name") for m in f.IFACE.finditer(sock.group(1)))[:16]
    elif msg.startswith("Using network"):
        net = f.USING_NET.match(msg)
        if net:
            proc.network = clip(net.group("net"))[:64]
    elif msg.startswith("Bootstrap"):
        boot = f.BOOTSTRAP.match(msg)
        if boot:
            proc.bootstrap_if = boot.group("if")[:64]
    else:
        read_torch(proc, msg)  # e.g. "Connection refused, retrying"


def read_version(proc: ProcLog, msg: str) -> None:
    version = f.VERSION.search(msg)
    if version:
        proc.nccl_version = proc.nccl_version or version.group("v")
        proc.cuda_runtime = proc.cuda_runtime or version.group("cuda")


def _comm(proc: ProcLog, msg: str) -> None:
    match = f.COMM.search(msg)
    if not match:
        return
    key = match.group("id") or match.group("comm")
    comm = proc.comms.get(key)
    if comm is None and not match.group("id"):  # Abort lines name the pointer only
        comm = next((c for c in proc.comms.values() if c.comm == match.group("comm")), None)
    rank, nranks = to_int(match.group("rank")), to_int(match.group("nranks"))
    if rank is None or nranks is None:
        return
    if comm is None:
        if len(proc.comms) >= MAX_COMMS:
            return
        comm = proc.comms[key] = Comm(match.group("comm"), rank, nranks, match.group("id"))
    comm.device = to_int(match.group("dev")) if match.group("dev") else comm.device
    comm.bus = match.group("bus") or comm.bus
    if match.group("what").lower() == "abort":
        comm.aborted = True
    elif match.group("state").upper() == "START":
        comm.started = True
    else:
        comm.started = comm.completed = True
    largest = max(proc.comms.values(), key=lambda c: c.nranks)
    proc.claim_rank(largest.rank, RANK_BY_COMM)
    if proc.rank_by == RANK_BY_COMM and proc.rank != largest.rank:
        proc.rank = largest.rank


def _warn(proc: ProcLog, match: re.Match, msg: str) -> None:
    location = None
    if match.group("file"):
        location = f"{match.group('file')}:{match.group('line')}"
    msg = clip(msg)
    key = f"{match.group('file') or ''} {normalised(msg)}"
    proc.warn_count += 1
    group = proc.warns.get(key)
    if group is None:
        if len(proc.warns) >= MAX_WARN_GROUPS:
            key = "(other warnings)"
            group = proc.warns.get(key)
        if group is None:
            group = proc.warns[key] = WarnGroup(key, msg, location)
    group.count += 1
    group.chain = ()
    proc.last_warn = group
    read_torch(proc, msg)  # a WARN may say "Connection refused" / name a peer
