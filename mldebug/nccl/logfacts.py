"""What one process said in a log, as the reader gathers it: every list and map capped.

The reader (logparse) fills these; the comparison (compare) reads them. Plain data and a few
helpers, no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

MAX_WARN_GROUPS = 32  # distinct WARN messages kept per process
MAX_ERRORS = 32  # distinct torch/gloo errors kept per process
MAX_TIMEOUTS = 16
MAX_CHAIN = 12  # `file.cc:L -> N` lines kept after a WARN
MAX_COMMS = 64
MAX_TEXT = 400  # characters kept of one message

_NUMBERS = re.compile(r"0x[0-9a-fA-F]+|\b\d+\b")

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


def clip(value: str) -> str:
    return value.strip()[:MAX_TEXT]


def to_int(value: str | None) -> int | None:
    if value is None:
        return None
    value = value.strip()
    if value.lstrip("-").isdigit() and len(value) < 20:
        return int(value)
    return None


def normalised(text: str) -> str:
    """`text` with its numbers and addresses taken out: messages that differ only there
    (a rank, a device, a pointer) are one message."""
    return _NUMBERS.sub("#", text)


def add_error(
    proc: ProcLog,
    kind: str,
    text: str,
    target: str | None = None,
    ranks: tuple[int, ...] = (),
) -> None:
    key = (kind, target, ranks) if kind != ERR_NCCL else (kind, normalised(text[:120]))
    fact = proc.errors.get(key)
    if fact is None:
        if len(proc.errors) >= MAX_ERRORS:
            return
        fact = proc.errors[key] = ErrorFact(kind, clip(text), target, ranks)
    fact.count += 1
