"""What `mldebug check` measured and what the analysis made of it: frozen dataclasses, no I/O.

The collector (collect/checklines.py) builds a `CheckResults` from the ranks' result lines
(preflight/wire.py); the analysis (analysis/check.py) turns it into a `CheckVerdict`; the views
(report/check.py) only render that.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mldebug.model import Finding


@dataclass(frozen=True)
class ComputeRate:
    """The best matmul rate one rank reached in one dtype, and over how many batches."""

    dtype: str
    tflops: float
    shape: tuple[int, ...] = ()
    batches: int = 0


@dataclass(frozen=True)
class CheckRank:
    rank: int
    host: str | None = None
    pid: int | None = None
    device: str | None = None  # "cpu", "cuda:3"
    device_name: str | None = None
    backend: str | None = None
    gpu: bool = False
    master: str | None = None  # the rendezvous address the rank was given
    started: bool = False  # it printed its start record
    joined: bool | None = None  # None: it never said (ended or was stopped before)
    failed_step: str | None = None  # preflight.wire.STEPS, or the phase the group failed in
    error: str | None = None  # the error it caught, as it printed it
    compute: tuple[ComputeRate, ...] = ()
    finished: bool = False  # it printed its end record
    last_phase: str | None = None  # the last phase it printed a record of
    seconds: float | None = None  # its own time, start to end
    said: tuple[str, ...] = ()  # the last lines of its stderr, for a rank in trouble
    transport: str | None = None  # NCCL's network (IB, Socket...), from its logs


@dataclass(frozen=True)
class CollectiveTime:
    """One op over one buffer size: the slowest rank's mean time (printed by the group)."""

    op: str  # all_reduce, all_gather, reduce_scatter
    bytes: int  # the whole buffer, as nccl-tests counts it
    seconds: float
    ranks: int  # the group's size
    backend: str | None = None


@dataclass(frozen=True)
class PairTime:
    """A buffer exchanged both ways between the first ranks of two hosts (each end says)."""

    hosts: tuple[str, str]
    ranks: tuple[int, int]
    bytes: int
    seconds: float


@dataclass(frozen=True)
class CheckResults:
    world_size: int | None
    ranks: tuple[CheckRank, ...]
    collectives: tuple[CollectiveTime, ...] = ()
    pairs: tuple[PairTime, ...] = ()
    unsupported: tuple[str, ...] = ()  # ops the backend does not have
    time_limit_hit: bool = False  # the check's time limit ended the ranks
    launcher_said: tuple[str, ...] = ()  # the last lines a wrapped launcher printed


@dataclass(frozen=True)
class Bandwidth:
    """nccl-tests' two figures for one op and size, in GB/s (1e9 bytes per second)."""

    op: str
    bytes: int
    seconds: float
    ranks: int
    algbw: float
    busbw: float


@dataclass(frozen=True)
class LinkRate:
    """One host pair's exchange: its bus bandwidth (GB/s) and its ratio to the median pair."""

    hosts: tuple[str, str]
    ranks: tuple[int, int]
    busbw: float
    ratio: float | None


@dataclass(frozen=True)
class DeviceRate:
    """One rank's best matmul rate in one dtype beside the median rank's."""

    rank: int
    host: str | None
    dtype: str
    tflops: float
    ratio: float | None  # to the median rank; None with too few ranks to compare


@dataclass(frozen=True)
class CheckVerdict:
    results: CheckResults
    findings: tuple[Finding, ...]
    bandwidth: tuple[Bandwidth, ...] = ()
    links: tuple[LinkRate, ...] = ()
    devices: tuple[DeviceRate, ...] = ()
    medians: dict[str, float] = field(default_factory=dict)  # dtype -> median TFLOPS
