"""What `mldebug explain` says: a finding with how sure it is, the lines it rests on, the
fix, and what a fragment cannot tell. Converts to the `Finding` every view knows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any

from mldebug.explain.text import Line
from mldebug.model import SEVERITY_ERROR, Finding

if TYPE_CHECKING:  # the catalog imports this module: it stays light (stream.py begins a read
    # before the engine's imports)
    from mldebug.nccl import scan as nccl_scan
    from mldebug.traces.model import RankTrace

# Kinds of explain's own readers (the `kind` in --json); NCCL and Flight Recorder findings
# keep the kinds of mldebug.model.
KIND_COLLECTIVE_MISMATCH = "collective_mismatch"
KIND_DDP_UNUSED = "ddp_unused_parameters"
KIND_GLOO_INTERFACE = "gloo_interface"
KIND_NCCL_INTERFACE = "nccl_interface"
KIND_NCCL_ERROR = "nccl_error"
KIND_DUPLICATE_GPU = "duplicate_gpu"
KIND_NCCL_CUDA_OOM = "nccl_cuda_oom"
KIND_NO_IB = "nccl_no_ib"
KIND_TIMEOUT_SUSPECT = "timeout_suspect"
KIND_WATCHDOG_STUCK = "watchdog_stuck"
KIND_SEQ_SPREAD = "seq_spread"
KIND_CHILD_FAILED = "child_failed"
KIND_BROKEN_P2P = "broken_p2p"
KIND_DEVICE_NOT_SET = "device_not_set"
KIND_CUDA_OOM = "cuda_oom"
KIND_LOSS_SCALE = "loss_scale_underflow"
KIND_PYTHON_ERROR = "python_error"
KIND_STACKS = "stacks"
# The catalog's families (catalog.py, readers/messages.py).
KIND_CUDA_ERROR = "cuda_error"
KIND_DATALOADER = "dataloader_worker"
KIND_PORT_IN_USE = "port_in_use"
KIND_GPU_HARDWARE = "gpu_hardware"
KIND_HOST_OOM = "host_oom"
KIND_DDP_MODEL_MISMATCH = "ddp_model_mismatch"
KIND_FSDP_STATE = "fsdp_state"
KIND_NATIVE_CRASH = "native_crash"
KIND_HARMLESS = "known_harmless"  # a warning torch prints that needs nothing done

# The kinds only explain's readers make (the others are mldebug.nccl's and Flight Recorder's).
EXPLAIN_KINDS = frozenset(
    value for name, value in dict(globals()).items() if name.startswith("KIND_")
)

MAX_CITED = 64  # lines a finding rests on, kept (the report shows the first few)


@dataclass(frozen=True)
class Explained:
    kind: str
    summary: str  # one sentence a person can act on
    confidence: float  # 0..1: how sure the reader is that this is the cause
    recipe: str | None
    fix: str = ""  # the first thing to do
    ranks: tuple[int, ...] = ()
    lines: tuple[str, ...] = ()  # "file:line" of the lines it rests on
    note: str = ""  # what the fragment can and cannot tell
    severity: str = SEVERITY_ERROR
    detail: str = ""
    location: str | None = None  # file:line in the user's code, where known
    waiting: tuple[int, ...] = ()  # the ranks that waited for `ranks`, where it says
    facts: tuple[tuple[str, str], ...] = ()  # (name, value): what code may ask of it
    then: str = ""  # words the engine adds after the summary (what followed this cause)

    def cited(self, lines: Sequence[Line]) -> Explained:
        """This finding resting on `lines`: each once, in the order of their source."""
        order: dict[str, int] = {}
        for line in lines:
            order.setdefault(line.source, len(order))
        ranked = sorted(lines, key=lambda line: (order[line.source], line.number))
        return replace(self, lines=tuple(dict.fromkeys(line.where for line in ranked))[:MAX_CITED])

    @classmethod
    def of(cls, finding: Finding, confidence: float, **more: Any) -> Explained:
        """Another reader's finding as one of explain's: every field of the same name."""
        shared = {f.name for f in fields(Finding)} & {f.name for f in fields(cls)}
        values: dict[str, Any] = {name: getattr(finding, name) for name in shared}
        return cls(**{**values, "confidence": confidence, **more})

    def as_finding(self) -> Finding:
        # Every field but `parts` is one of this finding's, under the same name.
        shared = {f.name for f in fields(Finding)} & {f.name for f in fields(self)}
        values: dict[str, Any] = {name: getattr(self, name) for name in shared}
        return Finding(**values)


def sure_word(confidence: float) -> str:
    if confidence >= 0.85:
        return "high"
    if confidence >= 0.6:
        return "medium"
    return "low"


@dataclass
class Source:
    name: str
    lines: int
    bytes_read: int
    truncated: bool = False


def _no_scan() -> nccl_scan.Scan:
    from mldebug.nccl import scan as nccl_scan

    return nccl_scan.Scan()


@dataclass
class Explanation:
    sources: list[Source] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    findings: list[Explained] = field(default_factory=list)
    ranks: set[int] = field(default_factory=set)
    scan: nccl_scan.Scan = field(default_factory=_no_scan)
    lines: list[Line] = field(default_factory=list)
    traces: list[RankTrace] = field(default_factory=list)  # torch.profiler traces, one a rank
    trace_bytes: int = 0

    @property
    def readable(self) -> bool:
        return (
            bool(self.sources) or bool(self.scan.dumps) or bool(self.scan.ras) or bool(self.traces)
        )

    @property
    def errors(self) -> bool:
        return any(f.severity == SEVERITY_ERROR for f in self.findings)
