"""CUDA out-of-memory messages: which allocation, on which rank and GPU, how much was
reserved but unallocated (fragmentation), other processes on the same GPU (a rank that
did not set its device), and OOMs while gathering a full state dict (FSDP, DeepSpeed
ZeRO-3). And fp16 loss scaling that ran down to its floor.

Formats: torch 2.x "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total
capacity of 79.14 GiB of which 1.23 GiB is free. Process 4242 has 20.1 GiB memory in use.
... Of the allocated memory 60.12 GiB is allocated by PyTorch, and 14.80 GiB is reserved by
PyTorch but unallocated."; torch 1.x "(GPU 0; 39.59 GiB total capacity; 35.54 GiB already
allocated; 276.19 MiB free; 37.22 GiB reserved in total by PyTorch)"; apex's "Gradient
overflow.  Skipping step, loss scaler 0 reducing loss scale to X"; DeepSpeed's "OVERFLOW!
Rank 0 Skipping step. Attempted loss scale: 4, reducing to 2" and "Current loss scale
already at minimum - cannot decrease scale anymore".
"""

from __future__ import annotations

import re
from dataclasses import replace

from mldebug.explain.finding import KIND_CUDA_OOM, KIND_DEVICE_NOT_SET, KIND_LOSS_SCALE, Explained
from mldebug.explain.text import Line, window
from mldebug.ranges import format_ranks

_SIZE = r"([\d.]+) ([KMGTE]i?B)"
_TRIED = re.compile(r"Tried to allocate (?:more than )?([\d.]+) ?([KMGTE]i?B)")
FRAGMENTED = 256 << 20  # reserved-but-unallocated below this is the allocator's slack
_GPU = re.compile(r"GPU (\d+)(?: has a total capacity of " + _SIZE + r")?")
_FREE = re.compile(r"of which " + _SIZE + r" is free|" + _SIZE + r" free")
_RESERVED_FREE = re.compile(_SIZE + r" is reserved by PyTorch but unallocated")
_ALLOCATED = re.compile(_SIZE + r" (?:is allocated by PyTorch|already allocated)")
_RESERVED_OLD = re.compile(_SIZE + r" reserved in total by PyTorch")
_PROCESS = re.compile(r"Process (\d+) has " + _SIZE + r" memory in use")
_RANK_IN = re.compile(r"on rank (\d+)|\[Rank (\d+)\]|rank(\d+)\]")
_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40, "E": 1 << 60}
STATE_DICT = (
    "state_dict",
    "_state_dict_utils",
    "Failed to clone() tensor",
    "consolidate",
    "zero_to_fp32",
    "gather_16bit",
    "save_16bit_model",
    "_zero3_consolidated",
    "save_checkpoint",
)
_APEX = re.compile(
    r"Gradient overflow\.\s+Skipping step, loss scaler \d+ reducing loss scale to ([\d.e+-]+)"
)
_DS = re.compile(
    r"OVERFLOW! Rank \d+ Skipping step\. Attempted loss scale: ([\d.e+-]+), reducing to ([\d.e+-]+)"
)
_AMP_MIN = "Current loss scale already at minimum"


def _bytes(number: str, unit: str) -> float:
    try:
        return float(number) * _UNITS.get(unit[0].upper(), 1)
    except ValueError:
        return 0.0


def _gib(value: float) -> str:
    return f"{value / (1 << 30):.2f} GiB" if value >= 1 << 30 else f"{value / (1 << 20):.0f} MiB"


def _oom(lines: list[Line], index: int, together: tuple[int, ...] = ()) -> Explained:
    """The CUDA OOM at lines[index]; `together`: the ranks it is said for (the same OOM
    seen on each of them), else the one its line names."""
    around = window(lines, index, 0, 6)
    text = " ".join(line.text for line in around)
    tried = _TRIED.search(text)
    gpu = _GPU.search(text)
    want = _bytes(*tried.groups()) if tried else 0.0
    spare = _RESERVED_FREE.search(text)
    reserved_free = _bytes(*spare.groups()) if spare else 0.0
    old_reserved = _RESERVED_OLD.search(text)
    allocated = _ALLOCATED.search(text)
    if not spare and old_reserved and allocated:
        reserved_free = _bytes(*old_reserved.groups()) - _bytes(*allocated.groups())
    others = [(pid, _bytes(n, u)) for pid, n, u in _PROCESS.findall(text)]
    line = lines[index]
    rank = line.rank
    if rank is None:
        named = _RANK_IN.search(text)
        rank = int(next(g for g in named.groups() if g)) if named else None
    ranks = (rank,) if rank is not None else ()
    on = f"rank {rank}" if rank is not None else "a rank"
    if together:
        on = f"ranks {format_ranks(together)}" if len(together) > 1 else f"rank {together[0]}"
    gpu_text = f" on GPU {gpu.group(1)}" if gpu else ""
    asked = f" asking for {_gib(want)}" if want else ""
    near = lines[max(0, index - 40) : index + 40]
    state_dict = next((w for w in STATE_DICT for l2 in near if w in l2.text), None)
    context = [next(l2 for l2 in near if state_dict in l2.text)] if state_dict else []
    if tried and "EB" in tried.group(2).upper():
        return Explained(
            KIND_CUDA_OOM,
            f"{on} asked for {tried.group(1)} {tried.group(2)}: a size no GPU has; a corrupted "
            "size (often after a collective that failed or timed out) rather than real memory "
            "pressure",
            0.45,
            "cuda-oom",
            fix="look at the error before this one (a timeout or NCCL error): it is the cause",
            ranks=ranks,
        ).cited([line])
    if len(others) > 1:
        return Explained(
            KIND_DEVICE_NOT_SET,
            f"{on} ran out of memory{gpu_text} while {len(others)} processes "
            f"({', '.join(p for p, _ in others[:6])}) hold memory on it: several ranks share "
            "this GPU (each did not select its own device before CUDA started)",
            0.85,
            "duplicate-gpu",
            fix="call torch.cuda.set_device(LOCAL_RANK) first thing in every rank; load "
            "checkpoints with map_location='cpu' or the rank's own device",
            ranks=ranks,
        ).cited(around[:2])
    if state_dict:
        return Explained(
            KIND_CUDA_OOM,
            f"{on} ran out of GPU memory{gpu_text}{asked} while gathering a full state dict "
            f"({state_dict}): the whole model is assembled on one GPU to be saved",
            0.9,
            "cuda-oom",
            fix="gather on the CPU: FSDP FullStateDictConfig(offload_to_cpu=True, "
            "rank0_only=True) or SHARDED_STATE_DICT; DeepSpeed ZeRO-3: "
            "stage3_gather_16bit_weights_on_model_save=false and zero_to_fp32.py offline",
            ranks=ranks,
        ).cited(around[:1] + context)
    if want and reserved_free >= max(want, FRAGMENTED):
        return Explained(
            KIND_CUDA_OOM,
            f"{on} ran out of memory{gpu_text}{asked} while {_gib(reserved_free)} was reserved "
            "by PyTorch but unallocated: the memory is fragmented, not full",
            0.92,
            "cuda-oom-fragmentation",
            fix="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True; pad variable sizes to a "
            "few buckets",
            ranks=ranks,
        ).cited(around[:2])
    return Explained(
        KIND_CUDA_OOM,
        f"{on} ran out of GPU memory{gpu_text}{asked}"
        + (
            f" ({_gib(reserved_free)} reserved but unallocated: not fragmentation)" if spare else ""
        ),
        0.88,
        "cuda-oom",
        fix="lower the batch size or sequence length, use activation checkpointing or mixed "
        "precision; compare with the other ranks: one rank alone points at its data",
        ranks=ranks,
        note="only this rank's OOM is in the paste" if rank is not None else "",
    ).cited(around[:1])


def _scale(lines: list[Line]) -> list[Explained]:
    floor = [line for line in lines if _AMP_MIN in line.text]
    drops: list[tuple[Line, float]] = []
    for line in lines:
        if "loss scale" not in line.text:
            continue
        apex = _APEX.search(line.text)
        ds = _DS.search(line.text) if apex is None else None
        try:
            if apex:
                drops.append((line, float(apex.group(1))))
            elif ds:
                drops.append((line, float(ds.group(2))))
        except ValueError:
            continue
    low = [item for item in drops if item[1] <= 1.0]
    if not floor and len(low) < 1 and len(drops) < 8:
        return []
    last = drops[-1][1] if drops else None
    sure = 0.95 if floor else (0.85 if low else 0.6)
    return [
        Explained(
            KIND_LOSS_SCALE,
            "fp16 dynamic loss scaling ran down"
            + (' to its minimum ("Current loss scale already at minimum")' if floor else "")
            + (f" to {last:g}" if last is not None and not floor else "")
            + f" after {len(drops)} overflowing steps: the gradients overflow fp16 at every scale "
            "(an inf/NaN in the forward or loss, not a scale that is too high)",
            sure,
            "fp16-loss-scale",
            fix="train in bf16 if the GPU has it; otherwise find the first inf (mldebug run "
            "--detect-anomaly), lower the learning rate, clip gradients, keep the loss in fp32",
            ranks=tuple(sorted({line.rank for line, _ in drops if line.rank is not None})),
        ).cited(floor[:1] + [line for line, _ in low] + [line for line, _ in drops])
    ]


def read(lines: list[Line]) -> list[Explained]:
    found: list[Explained] = []
    at: list[int] = []  # the line of each finding
    seen: set[tuple] = set()
    for index, line in enumerate(lines):
        if "out of memory" in line.text and "CUDA" in line.text and "Cuda failure" not in line.text:
            got = _oom(lines, index)
            key = (got.kind, got.ranks, got.recipe)
            if key not in seen:
                seen.add(key)
                found.append(got)
                at.append(index)
    if len(found) > 1:  # the same OOM on many ranks: one finding
        first = found[0]
        same = [f for f in found if f.recipe == first.recipe and f.kind == first.kind]
        ranks = tuple(sorted({r for f in same for r in f.ranks}))
        if len(same) > 1 and ranks:
            worded = _oom(lines, at[0], ranks if first.ranks else ())
            merged = replace(
                worded,
                ranks=ranks,
                lines=tuple(dict.fromkeys(w for f in same for w in f.lines))[:6],
            )
            found = [merged] + [f for f in found if f not in same]
    return found[:3] + _scale(lines)
