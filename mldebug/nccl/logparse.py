"""One pass over NCCL debug output and torch.distributed error text, in constant memory.

A file is read in binary, a chunk at a time. Only lines that hold one of a few keywords are
looked at (`bytes.find` over the chunk, in C), so the `Channel 00/64 : 0` lines that make up
most of an INFO log cost nothing but the search; a line is cut at MAX_LINE bytes and never
held whole, and undecodable bytes are replaced. What each process said is gathered into a
`ProcLog`, whose every list and map is capped, so a file of any size or content costs the
same memory.

Formats (facts from NCCL's src/debug.cc, init.cc and checks.h of 2.7 to 2.29, and torch's
ProcessGroupNCCL.cpp, ProcessGroupGloo.cpp and TCPStore of 1.x to 2.13):

    host:pid:tid [dev] NCCL INFO message
    \\n[2026-12-01 00:23:43] host:pid:tid [dev] file.cc:line (func) NCCL WARN message
    host:pid:tid [dev] file.cc:line NCCL WARN message          (before 2.28: no func)
    host:pid:tid [dev] NCCL INFO misc/socket.cc:484 -> 6       (an error unwinding)
    [rank0]:[E1201 00:23:43.367 ProcessGroupNCCL.cpp:689] [PG ID 0 PG GUID 0(default_pg) Rank 0] ...

Ahead of any of them may stand a launcher's prefix: `[host:rank] ` (mldebug run),
`[rank3]:` (torch), `[1,3]<stderr>:` (Open MPI --tag-output), `[3] ` (MPICH -prepend-rank),
`3: ` (srun --label), and colour codes.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from mldebug import rundir

CHUNK = 256 << 10  # bytes read at a time: small enough to stay in the CPU cache for every keyword pass
MAX_LINE = 4096  # NCCL itself cuts a line at 1024 bytes; torch's messages are longer
MAX_PROCS = 4096  # processes told apart in one file; more are one "others" bucket
MAX_WARN_GROUPS = 32  # distinct WARN messages kept per process
MAX_ERRORS = 32  # distinct torch/gloo errors kept per process
MAX_TIMEOUTS = 16
MAX_CHAIN = 12  # `file.cc:L -> N` lines kept after a WARN
MAX_COMMS = 64
MAX_TEXT = 400  # characters kept of one message

# The words a line must hold to be looked at: few (each is one pass of `bytes.find` over
# the chunk) and chosen so the lines NCCL writes by the thousand (Channel, Trees, Ring,
# Connected, one per collective with NCCL_DEBUG_SUBSYS=COLL) hold none of them.
KEYWORDS = (
    b"NCCL WARN",
    b"ersion",  # NCCL version X, cudaDriverVersion N
    b"Using",  # Using network X, NET/IB : Using, NET/Socket : Using, Bootstrap : Using
    b"busId ",  # comm 0x.. rank R nranks N cudaDev D busId B ... - Init START / Abort
    b".cc:",  # file.cc:L -> N unwinding; gloo's errors name their .cc file
    b"ank ",  # "[Rank R]", "[PG ID 0 ... Rank R]": the watchdog's every message; barriers
    b"rror",  # NCCL error, Last error, DistStoreError (clients joined), RuntimeError
    b"[c10d]",  # the TCPStore client: failed to connect to [host]:port
)

_ANSI = re.compile(rb"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-_]")
# Launcher prefixes, tried in a loop at the start of a line.
_PREFIXES = re.compile(
    r"\[(?P<host>[A-Za-z0-9_.-]+):(?P<mrank>\d+)\] "  # mldebug run: [host:rank]
    r"|\[rank(?P<trank>\d+)\]:"  # torch: [rank3]:
    r"|\[\d+,(?P<orank>\d+)\]<std(?:out|err)>:"  # Open MPI --tag-output
    r"|\[(?P<hrank>\d+)\] (?!NCCL )"  # MPICH -prepend-rank: [3]
    r"|(?P<srank>\d+): "  # srun --label
    r"|\[\d{4}-\d\d-\d\d[T ][0-9:.,]+Z?\] "  # a timestamp: NCCL's before WARN, or a logger's
    r"|\s+"
)
# glog / c10 log heads: "[E1201 00:23:43.367818701 ProcessGroupNCCL.cpp:689] ",
# "[E ProcessGroupNCCL.cpp:587] ", "E1201 00:23:43.367 58626 ProcessGroupNCCL.cpp:869] ".
_GLOG = re.compile(r"\[?[IWEF](?:\d{4} [0-9:.]+)?(?: \d+)? [\w.]+:\d+\] ")
_NCCL = re.compile(
    r"(?P<host>[^\s:\[\]]+):(?P<pid>\d+):(?P<tid>\d+) "
    r"(?:\[(?P<dev>-?\d+)\] )?(?:[0-9.]+ )?"
    r"(?:(?P<file>[^\s:]+):(?P<line>\d+) (?:\((?P<func>[^)]*)\) )?)?"
    r"NCCL (?P<level>INFO|WARN|TRACE|CALL|ABORT) ?(?P<msg>.*)"
)
_VERSION = re.compile(r"NCCL version (?P<v>\d+\.\d+\.\d+)(?:[^+\s]*\+cuda(?P<cuda>\d+\.\d+))?")
_DRIVER = re.compile(r"cudaDriverVersion (?P<v>\d+)")
_COMM = re.compile(
    r"comm (?P<comm>0x[0-9a-fA-F]+|\(nil\)) rank (?P<rank>\d+) nranks (?P<nranks>\d+)"
    r"(?: cudaDev (?P<dev>-?\d+))?(?:.*?busId (?P<bus>[0-9a-fA-F]+))?"
    r"(?:.*?commId (?P<id>0x[0-9a-fA-F]+))?.*- (?P<what>Init|Abort) (?P<state>START|COMPLETE)",
    re.IGNORECASE,
)
_NET_IB = re.compile(
    r"NET/IB ?: (?:Using(?P<devs>.*?)(?:; OOB (?P<oob>[^\s:]+)\S*)?\s*$|(?P<none>No device))"
)
_NET_SOCKET = re.compile(r"NET/Socket ?: Using (?P<ifs>.*)")
_IFACE = re.compile(r"\[\d+\]\s*(?P<name>[^\s:\[\]]+)")
_BOOTSTRAP = re.compile(r"Bootstrap ?: Using (?:\[\d+\])?(?P<if>[^\s:<]+)")
_USING_NET = re.compile(r"Using network (?P<net>.+)")
_UNWIND = re.compile(r"(?P<file>[\w./-]+\.cc):(?P<line>\d+) -> (?P<code>\d+)")
_PG = re.compile(
    r"\[PG (?:ID )?(?P<pg>\d+)(?: PG GUID (?P<guid>[^\s\]]+))? Rank (?P<rank>\d+)\]"
    r"|\[Rank (?P<rank2>\d+)\]"
)
_WORK = re.compile(r"WorkNCCL\((?P<fields>(?:[^()]|\(ms\))*)\)")
_FIELD = re.compile(r"(\w+(?:\(ms\))?)=([^,]*)")
_RAN_FOR = re.compile(r"ran for (\d+) (?:milliseconds|ms)")
_LAST = re.compile(
    r"[Ll]ast enqueued (?:NCCL )?work: (?P<enq>-?\d+), last completed (?:NCCL )?work: (?P<done>-?\d+)"
)
_FAILED_AT = re.compile(
    r"(?:Timeout at NCCL work|detected by watchdog at work|at work sequence id):? (?P<seq>-?\d+)"
)
_DUMP_FROM = re.compile(
    r"dump signal due to a collective timeout from\s+(?:rank (?P<rank>\d+)|this)"
)
_STUCK = re.compile(r"watchdog got stuck for (?P<s>\d+) seconds|Heartbeat monitor timed out")
_GLOO_TIMEOUT = re.compile(r"Timed out waiting (?P<ms>\d+)ms for (?P<op>recv|send) operation")
_CLOSED = re.compile(
    r"Connection (?P<how>closed|reset) by peer(?: \[(?P<host>[^\]]+)\]:(?P<port>\d+))?"
)
_CONNECT_TO = re.compile(
    r"[Cc]onnect(?: to)? (?:to )?(?:\[(?P<h1>[^\]]+)\]:(?P<p1>\d+)|(?P<h2>[0-9A-Za-z_.:-]+?)<(?P<p2>\d+)>"
    r"|\((?P<h3>[^,()]+), (?P<p3>\d+)\))"
)
_ENFORCE = re.compile(r"enforce fail at (?P<where>[^\]]+)\] (?P<what>.*)")
_BARRIER = re.compile(
    r"Ranks? (?P<ranks>\d+(?:, ?\d+)*) failed to pass monitoredBarrier(?: in (?P<ms>\d+) ms)?"
)
_CLIENTS = re.compile(
    r"Timed out after (?P<s>\d+) seconds waiting for clients\. (?P<got>\d+)/(?P<want>\d+) clients joined"
)
_NCCL_ERROR = re.compile(
    r"NCCL error(?: in: \S+)?[:,]? (?P<what>[^,]*)(?:.*NCCL version (?P<v>[\d.]+))?"
)
_HEX = re.compile(r"0x[0-9a-fA-F]+|\b\d+\b")
_PATH_RANK = re.compile(r"(?:^|[^a-z])rank[_.-]?(?P<rank>\d+)(?:$|[^0-9])", re.IGNORECASE)

NCCL_RESULTS = {
    "1": "ncclUnhandledCudaError",
    "2": "ncclSystemError",
    "3": "ncclInternalError",
    "4": "ncclInvalidArgument",
    "5": "ncclInvalidUsage",
    "6": "ncclRemoteError",
}


@dataclass
class Comm:
    comm: str
    rank: int
    nranks: int
    comm_id: str | None = None
    device: int | None = None
    bus: str | None = None
    started: bool = False
    completed: bool = False
    aborted: bool = False


@dataclass
class WarnGroup:
    key: str  # location and the message with its numbers taken out
    text: str  # the first message as written
    location: str | None
    count: int = 0
    chain: tuple[str, ...] = ()  # the `file.cc:L -> N` lines that followed it


@dataclass
class TimeoutFact:
    pg: str
    seq: int | None
    op: str | None
    numel_in: int | None = None
    numel_out: int | None = None
    timeout_ms: int | None = None
    ran_ms: int | None = None
    blocking: bool = False


@dataclass
class ErrorFact:
    kind: str  # ERR_*
    text: str
    target: str | None = None  # host:port the error names
    ranks: tuple[int, ...] = ()  # ranks the error names (monitoredBarrier)
    count: int = 0


ERR_REFUSED = "refused"
ERR_CLOSED = "closed"
ERR_CLIENTS = "clients"
ERR_GLOO_TIMEOUT = "gloo_timeout"
ERR_SIZE = "size_mismatch"
ERR_BARRIER = "monitored_barrier"
ERR_HEARTBEAT = "heartbeat"
ERR_NCCL = "nccl_error"


@dataclass
class ProcLog:
    """What one process said, in one file. Fields stay None when nothing said them."""

    source: str
    host: str | None = None
    pid: int | None = None
    rank: int | None = None  # the best guess so far, and how sure (RANK_BY_*)
    rank_by: int = 0
    nccl_version: str | None = None
    cuda_runtime: str | None = None
    cuda_driver: str | None = None
    device: int | None = None
    network: str | None = None  # "IB", "Socket", a plugin's name
    ib_devices: tuple[str, ...] | None = None  # () when NCCL found none
    ib_oob: str | None = None
    socket_ifs: tuple[str, ...] = ()
    bootstrap_if: str | None = None
    comms: dict[str, Comm] = field(default_factory=dict)
    warns: dict[str, WarnGroup] = field(default_factory=dict)
    warn_count: int = 0
    last_warn: WarnGroup | None = None
    last_error_code: str | None = None
    timeouts: list[TimeoutFact] = field(default_factory=list)
    failed_seq: dict[str, int] = field(default_factory=dict)  # pg -> seq the watchdog names
    last_enqueued: dict[str, int] = field(default_factory=dict)  # pg -> seq
    last_completed: dict[str, int] = field(default_factory=dict)
    dump_from: int | None = None  # the rank whose timeout made this one dump
    errors: dict[tuple, ErrorFact] = field(default_factory=dict)
    nccl_lines: int = 0  # lines that were NCCL's (of those looked at)
    torch_lines: int = 0  # other lines that said something (an error, a timeout, a count)

    def claim_rank(self, rank: int, how: int) -> None:
        if how > self.rank_by:
            self.rank, self.rank_by = rank, how


RANK_BY_COMM = 1  # the rank in its largest communicator
RANK_BY_PG = 2  # "[PG 0 Rank R]": the default group's rank is the global rank
RANK_BY_PREFIX = 3  # a launcher's prefix
RANK_BY_PATH = 4  # ranks/<rank>/stderr.log, stderr.rank3.txt


@dataclass
class FileLog:
    """A file's processes, and how much of it was read."""

    path: str
    procs: list[ProcLog]
    bytes_read: int = 0
    lines: int = 0
    cut_lines: int = 0  # lines longer than MAX_LINE
    truncated: bool = False  # stopped at the byte limit
    error: str | None = None  # why it could not be read


def rank_of_path(path: str) -> int | None:
    """The rank a file's path names: ranks/<rank>/..., or rank3 / rank_3 in its name."""
    parts = path.replace("\\", "/").split("/")
    if len(parts) >= 3 and parts[-3] == "ranks":
        return rundir.parse_rank(parts[-2])
    match = _PATH_RANK.search(parts[-1])
    return rundir.parse_rank(match.group("rank")) if match else None


def _text(value: str) -> str:
    return value.strip()[:MAX_TEXT]


def _int(value: str | None) -> int | None:
    if value is None:
        return None
    value = value.strip()
    if value.lstrip("-").isdigit() and len(value) < 20:
        return int(value)
    return None


def _prefixes(text: str) -> tuple[str | None, int | None, int]:
    """The host and rank launcher prefixes at the start of a line name, and where the
    line's own text starts."""
    host, rank, pos = None, None, 0
    while True:
        match = _PREFIXES.match(text, pos)
        if not match or match.end() == pos:
            return host, rank, pos
        groups = match.groupdict()
        for name in ("mrank", "trank", "orank", "hrank", "srank"):
            if groups[name] is not None:
                rank = int(groups[name]) if len(groups[name]) < 8 else None
        host = groups["host"] or host
        pos = match.end()


class LogParser:
    """Feed it a file's bytes (`feed`, then `close`); read `procs` after."""

    def __init__(self, source: str, rank: int | None = None) -> None:
        self.source = source
        self.path_rank = rank
        self._procs: dict[tuple, ProcLog] = {}
        self._last: ProcLog | None = None  # who wrote the previous line looked at
        self._carry = b""
        self._skipping = False
        self.lines = 0
        self.cut_lines = 0
        self._pending_last_error: ProcLog | None = None
        self._bare_version: tuple | None = None  # "NCCL version X" without a prefix

    # ---- bytes -> lines -------------------------------------------------------------

    def feed(self, chunk: bytes) -> None:
        if self._skipping:  # in a line longer than MAX_LINE: drop bytes until it ends
            newline = chunk.find(b"\n")
            if newline == -1:
                return
            chunk = self._carry + b"\n" + chunk[newline + 1 :]
            self._carry, self._skipping = b"", False
        elif self._carry:
            chunk = self._carry + chunk
        end = chunk.rfind(b"\n") + 1
        if end:
            self.lines += chunk.count(b"\n", 0, end)
            self._scan(chunk, end)
        carry = chunk[end:]
        if len(carry) > MAX_LINE:
            carry = carry[:MAX_LINE]
            self._skipping = True
            self.cut_lines += 1
        self._carry = carry

    def close(self) -> list[ProcLog]:
        if self._carry:
            self.lines += 1
            self._scan(self._carry + b"\n", len(self._carry) + 1)
            self._carry = b""
        if self.path_rank is not None and not self._procs:  # a rank that said nothing
            self._proc(None, None, None)
        if self._bare_version:  # whose it is: the processes of this file that say none
            for proc in self._procs.values():
                if proc.nccl_lines and proc.nccl_version is None:
                    proc.nccl_version, proc.cuda_runtime = self._bare_version
        return self.procs

    @property
    def procs(self) -> list[ProcLog]:
        return list(self._procs.values())

    def _scan(self, data: bytes, end: int) -> None:
        starts = set()
        find, rfind = data.find, data.rfind
        if self._pending_last_error is not None:  # its line was the last of a chunk
            first = find(b"\n", 0, end)
            self._last_error(data[: first if first != -1 else end][:MAX_LINE])
        for word in KEYWORDS:
            at = find(word, 0, end)
            while at != -1:
                start = rfind(b"\n", 0, at) + 1
                starts.add(start)
                stop = find(b"\n", at, end)
                if stop == -1:
                    break
                at = find(word, stop, end)
        for start in sorted(starts):
            stop = find(b"\n", start, end)
            if stop == -1:
                stop = end
            if stop - start > MAX_LINE:
                self.cut_lines += 1
                stop = start + MAX_LINE
            line = data[start:stop]
            self._line(line)
            if self._pending_last_error is not None:  # "Last error:" then the error itself
                after = find(b"\n", stop + 1, end)
                if after != -1:
                    self._last_error(data[stop + 1 : after][:MAX_LINE])

    # ---- one line -------------------------------------------------------------------

    def _line(self, raw: bytes) -> None:
        if b"\x1b" in raw:
            raw = _ANSI.sub(b"", raw)
        if b"\r" in raw:  # a progress bar redrawn: what a terminal shows last
            raw = raw.rstrip(b"\r").rsplit(b"\r", 1)[-1]
        text = raw.decode("utf-8", "replace")
        host, prefix_rank, pos = _prefixes(text)
        glog = _GLOG.match(text, pos)
        if glog:
            pos = glog.end()
        body = text[pos:]
        nccl = _NCCL.match(body)
        if nccl:
            proc = self._proc(nccl.group("host"), _int(nccl.group("pid")), prefix_rank)
            proc.nccl_lines += 1
            self._nccl(proc, nccl)
            return
        proc = self._proc(host, None, prefix_rank)
        if body.startswith("NCCL version"):  # NCCL_DEBUG=VERSION, and NCCL 2.26+: no prefix
            self._version(proc, body)
            self._bare_version = (
                self._bare_version
                or proc.nccl_version
                and (
                    proc.nccl_version,
                    proc.cuda_runtime,
                )
            )
            return
        self._torch(proc, body)

    def _proc(self, host: str | None, pid: int | None, prefix_rank: int | None) -> ProcLog:
        if pid is not None:
            key = ("pid", host, pid)
        elif prefix_rank is not None:
            key = ("rank", prefix_rank)
        else:
            key = ("file",)
        proc = self._procs.get(key)
        if proc is None:
            if len(self._procs) >= MAX_PROCS:
                key = ("others",)
                proc = self._procs.get(key)
            if proc is None:
                proc = ProcLog(self.source, host, pid)
                if self.path_rank is not None:
                    proc.claim_rank(self.path_rank, RANK_BY_PATH)
                self._procs[key] = proc
        if prefix_rank is not None:
            proc.claim_rank(prefix_rank, RANK_BY_PREFIX)
        if host and proc.host is None:
            proc.host = host
        self._last = proc
        return proc

    def _nccl(self, proc: ProcLog, match: re.Match) -> None:
        msg = match.group("msg")
        dev = _int(match.group("dev"))
        if dev is not None and proc.device is None:
            proc.device = dev
        if match.group("level") == "WARN":
            self._warn(proc, match, msg)
            return
        if ".cc:" in msg and " -> " in msg:
            unwind = _UNWIND.search(msg)
            if unwind:
                proc.last_error_code = unwind.group("code")
                warn = proc.last_warn
                if warn is not None and len(warn.chain) < MAX_CHAIN:
                    warn.chain += (unwind.group(0),)
                return
        if "- Init " in msg or "- Abort " in msg:
            self._comm(proc, msg)
            return
        if "NCCL version" in msg:
            self._version(proc, msg)
        elif msg.startswith("cudaDriverVersion"):
            driver = _DRIVER.match(msg)
            if driver:
                value = int(driver.group("v")[:9])
                proc.cuda_driver = f"{value // 1000}.{value % 1000 // 10}"
        elif msg.startswith("NET/IB"):
            ib = _NET_IB.match(msg)
            if ib and ib.group("none"):
                proc.ib_devices = ()
            elif ib:
                devices = tuple(m.group("name") for m in _IFACE.finditer(ib.group("devs") or ""))
                proc.ib_devices = devices[:16]
                proc.ib_oob = ib.group("oob") or proc.ib_oob
        elif msg.startswith("NET/Socket"):
            sock = _NET_SOCKET.match(msg)
            if sock:
                proc.socket_ifs = tuple(m.group("name") for m in _IFACE.finditer(sock.group(1)))[
                    :16
                ]
        elif msg.startswith("Using network"):
            net = _USING_NET.match(msg)
            if net:
                proc.network = _text(net.group("net"))[:64]
        elif msg.startswith("Bootstrap"):
            boot = _BOOTSTRAP.match(msg)
            if boot:
                proc.bootstrap_if = boot.group("if")[:64]
        else:
            self._torch(proc, msg)  # e.g. "Connection refused, retrying"

    def _version(self, proc: ProcLog, msg: str) -> None:
        version = _VERSION.search(msg)
        if version:
            proc.nccl_version = proc.nccl_version or version.group("v")
            proc.cuda_runtime = proc.cuda_runtime or version.group("cuda")

    def _comm(self, proc: ProcLog, msg: str) -> None:
        match = _COMM.search(msg)
        if not match:
            return
        key = match.group("id") or match.group("comm")
        comm = proc.comms.get(key)
        if comm is None and not match.group("id"):  # Abort lines name the pointer only
            comm = next((c for c in proc.comms.values() if c.comm == match.group("comm")), None)
        rank, nranks = _int(match.group("rank")), _int(match.group("nranks"))
        if rank is None or nranks is None:
            return
        if comm is None:
            if len(proc.comms) >= MAX_COMMS:
                return
            comm = proc.comms[key] = Comm(match.group("comm"), rank, nranks, match.group("id"))
        comm.device = _int(match.group("dev")) if match.group("dev") else comm.device
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

    def _warn(self, proc: ProcLog, match: re.Match, msg: str) -> None:
        location = None
        if match.group("file"):
            location = f"{match.group('file')}:{match.group('line')}"
        msg = _text(msg)
        key = f"{match.group('file') or ''} {_HEX.sub('#', msg)}"
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
        self._torch(proc, msg)  # a WARN may say "Connection refused" / name a peer

    def _last_error(self, following: bytes) -> None:
        proc, self._pending_last_error = self._pending_last_error, None
        text = _ANSI.sub(b"", following).decode("utf-8", "replace")
        text = text[_prefixes(text)[2] :].strip()
        if text and proc is not None:
            self._error(proc, ERR_NCCL, f"last error: {text}")

    # ---- torch.distributed, gloo and c10d text --------------------------------------

    def _torch(self, proc: ProcLog, body: str) -> None:
        said = (len(proc.errors), len(proc.timeouts), proc.last_enqueued, proc.failed_seq)
        said = (said[0], said[1], dict(said[2]), dict(said[3]), proc.dump_from)
        self._torch_facts(proc, body)
        now = (len(proc.errors), len(proc.timeouts), proc.last_enqueued, proc.failed_seq)
        if said != (now[0], now[1], now[2], now[3], proc.dump_from):
            proc.torch_lines += 1

    def _torch_facts(self, proc: ProcLog, body: str) -> None:
        pg = "0"
        tag = _PG.search(body)
        if tag:
            pg = tag.group("pg") or "0"
            rank = _int(tag.group("rank") or tag.group("rank2"))
            if rank is not None and pg == "0":
                proc.claim_rank(rank, RANK_BY_PG)
        if "WorkNCCL(" in body and (
            "atchdog caught" in body or "blocking wait" in body or "aught collective" in body
        ):
            self._timeout(proc, body, "blocking wait" in body)
        last = _LAST.search(body) if "ast enqueued" in body else None
        if last:
            proc.last_enqueued[pg] = int(last.group("enq")[:12])
            proc.last_completed[pg] = int(last.group("done")[:12])
        failed = _FAILED_AT.search(body)
        if failed:
            proc.failed_seq[pg] = int(failed.group("seq")[:12])
        if "dump signal" in body:
            source = _DUMP_FROM.search(body)
            if source and source.group("rank"):
                proc.dump_from = int(source.group("rank")[:8])
        stuck = _STUCK.search(body)
        if stuck:
            self._error(proc, ERR_HEARTBEAT, body)
        if "Timed out" in body:
            gloo = _GLOO_TIMEOUT.search(body)
            if gloo:
                self._error(proc, ERR_GLOO_TIMEOUT, gloo.group(0))
            clients = _CLIENTS.search(body)
            if clients:
                self._error(proc, ERR_CLIENTS, clients.group(0))
        if "onnection" in body:
            closed = _CLOSED.search(body)
            if closed:
                target = closed.group("host")  # not the port: each pair of ranks has its own
                self._error(proc, ERR_CLOSED, closed.group(0), target)
        if "onnect" in body and not ("onnection closed" in body or "onnection reset" in body):
            to = (
                _CONNECT_TO.search(body)
                if ("refused" in body or "failed" in body or "timed out" in body)
                else None
            )
            if to or "refused" in body:
                target = None
                if to:
                    host = to.group("h1") or to.group("h2") or to.group("h3")
                    port = to.group("p1") or to.group("p2") or to.group("p3")
                    target = f"{host}:{port}"
                self._error(proc, ERR_REFUSED, body, target)
        if "nforce fail" in body:
            enforce = _ENFORCE.search(body)
            if enforce:
                self._error(proc, ERR_SIZE, enforce.group("what"), enforce.group("where"))
        if "onitoredBarrier" in body:
            barrier = _BARRIER.search(body)
            if barrier:
                named = tuple(
                    int(r) for r in re.findall(r"\d+", barrier.group("ranks"))[:64] if len(r) < 8
                )
                self._error(proc, ERR_BARRIER, barrier.group(0), None, named)
        if "NCCL error" in body:
            nccl = _NCCL_ERROR.search(body)
            if nccl:
                if nccl.group("v"):
                    proc.nccl_version = proc.nccl_version or nccl.group("v")
                self._error(proc, ERR_NCCL, nccl.group(0))
        if "communicator was aborted" in body:
            self._error(proc, ERR_NCCL, body)
        if body.rstrip().endswith("Last error:"):
            self._pending_last_error = proc

    def _timeout(self, proc: ProcLog, body: str, blocking: bool) -> None:
        work = _WORK.search(body)
        if not work:
            return
        fields = dict(_FIELD.findall(work.group("fields")))
        ran = _RAN_FOR.search(body)
        tag = _PG.search(body)
        pg = tag.group("pg") if tag and tag.group("pg") else "0"
        fact = TimeoutFact(
            pg=pg,
            seq=_int(fields.get("SeqNum")),
            op=_text(fields["OpType"])[:40] if "OpType" in fields else None,
            numel_in=_int(fields.get("NumelIn")),
            numel_out=_int(fields.get("NumelOut")),
            timeout_ms=_int(fields.get("Timeout(ms)")),
            ran_ms=_int(ran.group(1)) if ran else None,
            blocking=blocking,
        )
        for known in proc.timeouts:  # torch repeats it (terminated with..., what():)
            if (known.pg, known.seq, known.op) == (fact.pg, fact.seq, fact.op):
                known.ran_ms = known.ran_ms or fact.ran_ms
                return
        if len(proc.timeouts) < MAX_TIMEOUTS:
            proc.timeouts.append(fact)

    def _error(
        self,
        proc: ProcLog,
        kind: str,
        text: str,
        target: str | None = None,
        ranks: tuple[int, ...] = (),
    ) -> None:
        key = (kind, target, ranks) if kind != ERR_NCCL else (kind, _HEX.sub("#", text[:120]))
        fact = proc.errors.get(key)
        if fact is None:
            if len(proc.errors) >= MAX_ERRORS:
                return
            fact = proc.errors[key] = ErrorFact(kind, _text(text), target, ranks)
        fact.count += 1


def normalised(text: str) -> str:
    """`text` with its numbers and addresses taken out: messages that differ only there
    (a rank, a device, a pointer) are one message."""
    return _HEX.sub("#", text)


def parse_bytes(data: bytes, source: str = "<bytes>", rank: int | None = None) -> list[ProcLog]:
    """The processes of a log given whole (tests, small texts)."""
    parser = LogParser(source, rank)
    for start in range(0, len(data), CHUNK):
        parser.feed(data[start : start + CHUNK])
    return parser.close()


def parse_file(
    path: str,
    rank: int | None = None,
    limit: int | None = None,
    tail: int | None = None,
) -> FileLog:
    """Read one file in one pass: all of it, its first `limit` bytes, or its last `tail`
    bytes (stderr, where the errors are). Never through a symlink, never blocking; a file
    that cannot be read comes back with `error` set."""
    rank = rank if rank is not None else rank_of_path(path)
    parser = LogParser(path, rank)
    read = 0
    truncated = False
    try:
        fd = rundir.open_regular(path)
    except OSError as error:
        return FileLog(path, [], error=error.strerror or str(error))
    try:
        if tail is not None:
            size = os.fstat(fd).st_size
            if size > tail:
                os.lseek(fd, size - tail, os.SEEK_SET)
                os.read(fd, 0)
                truncated = True
                skipped = os.read(fd, MAX_LINE)  # the first line was cut: start after it
                newline = skipped.find(b"\n")
                read += len(skipped)
                if newline != -1:
                    parser.feed(skipped[newline + 1 :])
        while True:
            want = CHUNK if limit is None else min(CHUNK, limit - read)
            if want <= 0:
                truncated = os.read(fd, 1) != b""
                break
            chunk = os.read(fd, want)
            if not chunk:
                break
            read += len(chunk)
            parser.feed(chunk)
    except OSError as error:
        return FileLog(path, parser.procs, read, parser.lines, error=error.strerror or str(error))
    finally:
        os.close(fd)
    procs = parser.close()
    return FileLog(path, procs, read, parser.lines, parser.cut_lines, truncated)
