"""One rank's trace, read event by event into a `RankTrace`.

What torch.profiler writes, as read from recorded traces (tests/data/traces/record.py) and
from torch's sources (torch/csrc/profiler/util.h names the collective metadata keys):

- `ProfilerStep#N` (user_annotation): one training step, on the thread that called
  `prof.step()`.
- gloo: `c10d::allreduce_` and its kin (cpu_op) where the rank called the collective, and
  `gloo:all_reduce` ... (user_annotation) on gloo's own `pt_gloo_runloop` threads, from the
  start of the work to its completion: that span is the collective (waiting for the other
  ranks, then moving data).
- NCCL: `record_param_comms` (cpu_op) with args "Collective name", "Process Group Name",
  "In msg nelems", "Group size", and "Seq" in newer releases; the device side is a kernel
  (`cat: kernel`) named `ncclDevKernel_...` / `ncclKernel_...`, carrying the same args where
  kineto adds them.
- `enumerate(DataLoader)#..._next__` (user_annotation): waiting for the next batch.
- `aten::item` / `aten::_local_scalar_dense` and `cuda*Synchronize`: the host waits for
  the device.
- the top-level `distributedInfo` object: backend, rank, world_size.
"""

from __future__ import annotations

import os
import re

from mldebug.files import safeio
from mldebug.traces import intervals
from mldebug.traces.model import ON_DEVICE, ON_HOST, Collective, RankTrace
from mldebug.traces.stream import TraceError, TraceStream, open_trace

MAX_COLLECTIVES = 200_000  # per rank; the rest are counted in time, not matched
MAX_STEPS = 100_000
COMM_PREFIXES = ("gloo:", "c10d::", "nccl:", "record_param_comms")
DEVICE_COMM = ("nccl", "c10d")  # kernel names of collectives
DATA_PREFIX = "enumerate(DataLoader)"
SYNC_NAMES = frozenset(
    {
        "aten::item",
        "aten::_local_scalar_dense",
        "cudaStreamSynchronize",
        "cudaDeviceSynchronize",
        "cudaEventSynchronize",
        "hipStreamSynchronize",
        "hipDeviceSynchronize",
    }
)
# torch 1.9+ categories, and the capitalised ones of torch 1.8's traces
CPU_OPS = frozenset({"cpu_op", "Operator"})
HOST_CATS = CPU_OPS | {"user_annotation", "python_function", "cuda_runtime", "Runtime"}
DEVICE_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"})
KERNELS = frozenset({"kernel", "Kernel"})
_RANK_IN_NAME = re.compile(r"rank[_-]?(\d{1,6})", re.IGNORECASE)
_GLOO_OP = re.compile(r"^gloo:([a-z_]+)")
_NCCL_KERNEL = re.compile(r"^nccl(?:Dev)?Kernel_([A-Za-z]+)")  # ncclDevKernel_AllReduce_Sum_f32


def rank_of_name(path: str) -> int | None:
    match = _RANK_IN_NAME.search(os.path.basename(path))
    return int(match.group(1)) if match else None


def _number(value: object) -> float | None:
    return safeio.json_number(value)


def _op_of(name: str, args: dict) -> str:
    named = args.get("Collective name")
    if isinstance(named, str) and named:
        return named[:64]
    match = _GLOO_OP.match(name) or _NCCL_KERNEL.match(name)
    if match:
        return match.group(1)
    for prefix in ("c10d::", "nccl:"):
        if name.startswith(prefix):
            return name[len(prefix) :].rstrip("_")[:64]
    return name[:64]


def _size_of(args: dict) -> str:
    for key in ("In msg nelems", "Out msg nelems"):
        value = _number(args.get(key))
        if value is not None:
            return str(int(value))
    dims = args.get("Input Dims")
    return str(dims)[:200] if dims is not None else ""


def _seq_of(args: dict) -> int | None:
    value = _number(args.get("Seq"))
    return int(value) if value is not None and value >= 0 else None


class _Fold:
    """What the events of one trace add up to, kept bounded."""

    def __init__(self) -> None:
        self.host = intervals.Union()  # CPU ops that compute
        self.device = intervals.Union()  # kernels that compute
        self.host_comm = intervals.Union()
        self.device_comm = intervals.Union()
        self.data = intervals.Union()
        self.sync = intervals.Union()
        self.steps: list[tuple[float, float]] = []
        self.host_colls: list[Collective] = []
        self.device_colls: list[Collective] = []
        self.first = float("inf")
        self.last = float("-inf")
        self.events = 0

    def add(self, event: dict) -> None:
        self.events += 1
        if event.get("ph") != "X":
            return
        start, duration = _number(event.get("ts")), _number(event.get("dur"))
        if start is None or duration is None or duration < 0:
            return
        end = start + duration
        name = event.get("name")
        name = name if isinstance(name, str) else ""
        cat = event.get("cat")
        args = event.get("args")
        args = args if isinstance(args, dict) else {}
        if cat in DEVICE_CATS:
            self._span(start, end)
            if cat in KERNELS and name.lower().startswith(DEVICE_COMM):
                self.device_comm.add(start, end)
                self._collective(self.device_colls, name, args, start, duration)
            else:
                self.device.add(start, end)
            return
        if cat not in HOST_CATS:
            return
        self._span(start, end)
        if name.startswith("ProfilerStep#"):
            if len(self.steps) < MAX_STEPS:
                self.steps.append((start, end))
        elif name.startswith(DATA_PREFIX):
            self.data.add(start, end)
        elif name in SYNC_NAMES:
            self.sync.add(start, end)
        elif name.startswith(COMM_PREFIXES):
            self.host_comm.add(start, end)
            # the work on gloo's thread is the collective; the c10d:: call only enqueues it,
            # and record_param_comms is NCCL's (its kernel is the collective)
            if name.startswith("gloo:"):
                self._collective(self.host_colls, name, args, start, duration)
        elif cat in CPU_OPS:
            self.host.add(start, end)

    def _span(self, start: float, end: float) -> None:
        self.first = min(self.first, start)
        self.last = max(self.last, end)

    @staticmethod
    def _collective(into: list, name: str, args: dict, start: float, duration: float) -> None:
        if len(into) >= MAX_COLLECTIVES:
            return
        group = args.get("Process Group Name")
        into.append(
            Collective(
                group=str(group)[:64] if group is not None else "0",
                op=_op_of(name, args),
                size=_size_of(args),
                seq=_seq_of(args),
                start=start,
                duration=duration,
            )
        )


def _by_start(collective: Collective) -> float:
    return collective.start


def _distributed(meta: dict) -> tuple[int | None, int | None, str]:
    info = meta.get("distributedInfo")
    if not isinstance(info, dict):
        return None, None, ""
    rank, world = _number(info.get("rank")), _number(info.get("world_size"))
    backend = info.get("backend")
    return (
        int(rank) if rank is not None and rank >= 0 else None,
        int(world) if world is not None and world > 0 else None,
        backend[:32] if isinstance(backend, str) else "",
    )


def read_rank(path: str, max_chars: int | None = None) -> tuple[RankTrace, int | None]:
    """One trace file as a RankTrace, and the rank its own metadata gives (None: the
    caller names it). Raises TraceError (not a trace) or OSError (not readable)."""
    fold = _Fold()
    with open_trace(path) as text:
        stream = TraceStream(text) if max_chars is None else TraceStream(text, max_chars)
        for event in stream.events():
            fold.add(event)
        meta = stream.meta
    if not stream.has_events:
        raise TraceError("not a Chrome trace: it has no traceEvents")
    rank, world, backend = _distributed(meta)
    on_device = len(fold.device) > 0 or len(fold.device_comm) > 0
    if fold.steps:
        begin = min(s for s, _ in fold.steps)
        end = max(e for _, e in fold.steps)
    else:
        begin, end = fold.first, fold.last
    if end <= begin:
        raise TraceError("holds no timed events (no ph:X event with ts and dur)")
    compute = intervals.clip((fold.device if on_device else fold.host).spans(), begin, end)
    comm = intervals.clip((fold.device_comm if on_device else fold.host_comm).spans(), begin, end)
    busy = intervals.union(compute, comm)
    colls = fold.device_colls if on_device else fold.host_colls
    window = end - begin
    trace = RankTrace(
        source=path,
        rank=rank if rank is not None else -1,
        world_size=world,
        backend=backend,
        where=ON_DEVICE if on_device else ON_HOST,
        events=fold.events,
        steps=tuple(e - s for s, e in fold.steps),
        window=window,
        compute=intervals.total(compute),
        comm=intervals.total(comm),
        exposed=intervals.minus(comm, compute),
        idle=max(0.0, window - intervals.total(busy)),
        data=intervals.total(intervals.clip(fold.data.spans(), begin, end)),
        sync=intervals.total(intervals.clip(fold.sync.spans(), begin, end)),
        collectives=tuple(sorted((c for c in colls if begin <= c.start < end), key=_by_start)),
        cut=stream.cut,
    )
    return trace, rank
