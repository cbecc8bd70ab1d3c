"""Evidence that is not an error: a `p2pBandwidthLatencyTest` whose P2P=Enabled latency is
in milliseconds (or whose enabled bandwidth is far below the disabled one), and an
`nvidia-smi` process table where every process sits on GPU 0. Formats from the CUDA
samples' p2pBandwidthLatencyTest.cu and nvidia-smi (the 470 to 570 drivers' tables).
"""

from __future__ import annotations

import re

from mldebug.explain.finding import KIND_BROKEN_P2P, KIND_DEVICE_NOT_SET, Explained
from mldebug.explain.text import Line

_MATRIX = re.compile(r"P2P=(?P<state>Enabled|Disabled)\s+(?P<what>Latency|Bandwidth)")
_ROW = re.compile(r"^\s*(?P<gpu>\d+)\s+(?P<values>(?:[\d.]+\s*)+)$")
SLOW_US = 1000.0  # a P2P write that takes a millisecond is not going over NVLink or PCIe
_PROC = re.compile(
    r"^\|\s+(?P<gpu>\d+)\s+(?:N/A|\d+)\s+(?:N/A|\d+)\s+(?P<pid>\d+)\s+[CGM+]+\s+(?P<name>\S+)\s+(?P<mem>\d+)MiB\s*\|"
    r"|^\|\s+(?P<gpu2>\d+)\s+(?P<pid2>\d+)\s+[CGM+]+\s+(?P<name2>\S+)\s+(?P<mem2>\d+)MiB\s*\|"
)
_GPU_ROW = re.compile(r"^\|\s+(?P<gpu>\d+)\s+(?:NVIDIA|Tesla|GeForce|Quadro|A100|H100|RTX)")


def _matrices(lines: list[Line]) -> list[tuple[str, str, list[Line], list[list[float]]]]:
    out = []
    for index, line in enumerate(lines):
        head = _MATRIX.search(line.text)
        if not head:
            continue
        rows: list[list[float]] = []
        used = [line]
        for later in lines[index + 1 : index + 40]:
            row = _ROW.match(later.text)
            if row:
                rows.append([float(v) for v in row.group("values").split()])
                used.append(later)
            elif rows or not re.search(r"D\\D|GPU", later.text):
                if rows:
                    break
        if rows:
            out.append((head.group("state"), head.group("what"), used, rows))
    return out


def _p2p(lines: list[Line]) -> list[Explained]:
    found = []
    matrices = _matrices(lines)
    for state, what, used, rows in matrices:
        if state != "Enabled" or what != "Latency":
            continue
        slow = [
            (i, j, value)
            for i, row in enumerate(rows)
            for j, value in enumerate(row)
            if i != j and i < len(rows) and j < len(rows) and value >= SLOW_US
        ]
        if slow:
            i, j, worst = max(slow, key=lambda item: item[2])
            pairs = len(slow)
            found.append(
                Explained(
                    KIND_BROKEN_P2P,
                    f"P2P between GPUs is broken: with P2P enabled, GPU {i} -> GPU {j} takes "
                    f"{worst / 1000:.1f} ms ({pairs} pairs over {SLOW_US / 1000:g} ms; a working "
                    "link takes microseconds): NCCL over P2P will hang or crawl on this machine",
                    0.9,
                    "broken-p2p",
                    fix="confirm with NCCL_P2P_DISABLE=1 (it then works, slower); disable ACS on "
                    "the PCIe switches and the IOMMU (or iommu=pt), or use a driver with P2P "
                    "support for these GPUs",
                ).cited(used)
            )
            break
    if found:
        return found
    enabled = {w: rows for s, w, _, rows in matrices if s == "Enabled"}
    disabled = {w: rows for s, w, _, rows in matrices if s == "Disabled"}
    if "Bandwidth" in enabled and "Bandwidth" in disabled:
        on, off = enabled["Bandwidth"], disabled["Bandwidth"]
        worse = [
            (i, j, on[i][j], off[i][j])
            for i in range(min(len(on), len(off)))
            for j in range(min(len(on[i]), len(off[i])))
            if i != j and on[i][j] < off[i][j] / 4
        ]
        if worse:
            i, j, a, b = min(worse, key=lambda item: item[2] / max(item[3], 1e-9))
            used = [l2 for s, w, rows_, _ in matrices for l2 in rows_ if w == "Bandwidth"]
            found.append(
                Explained(
                    KIND_BROKEN_P2P,
                    f"P2P makes transfers slower: GPU {i} -> GPU {j} moves {a:g} GB/s with P2P "
                    f"enabled and {b:g} GB/s without: the P2P path is broken or routed through "
                    "the CPU (ACS, IOMMU)",
                    0.85,
                    "broken-p2p",
                    fix="NCCL_P2P_DISABLE=1 to confirm; disable ACS / the IOMMU in the BIOS or "
                    "kernel (iommu=pt)",
                ).cited(used)
            )
    return found


def _smi(lines: list[Line]) -> list[Explained]:
    procs: list[tuple[int, str, int, Line]] = []
    gpus: set[int] = set()
    gpu_rows: list[Line] = []
    for line in lines:
        text = line.text.strip()
        if not text.startswith("|"):
            continue
        row = _GPU_ROW.match(text)
        if row:
            gpus.add(int(row.group("gpu")))
            gpu_rows.append(line)
        proc = _PROC.match(text)
        if proc:
            gpu = int(proc.group("gpu") or proc.group("gpu2"))
            pid = proc.group("pid") or proc.group("pid2")
            name = proc.group("name") or proc.group("name2")
            mem = int(proc.group("mem") or proc.group("mem2"))
            if "python" in name or "torch" in name or name.endswith(("train", "accelerate")):
                procs.append((gpu, pid, mem, line))
                gpus.add(gpu)
    pids = {pid for _, pid, _, _ in procs}
    if len(pids) < 2:
        return []
    on: dict[str, dict[int, int]] = {}
    for gpu, pid, mem, _line in procs:
        on.setdefault(pid, {})[gpu] = mem
    if all(set(where) == {0} for where in on.values()) and len(gpus) > 1:
        return [
            Explained(
                KIND_DEVICE_NOT_SET,
                f"all {len(pids)} training processes run on GPU 0 while GPUs "
                f"{', '.join(map(str, sorted(gpus - {0})[:6]))} have none: no rank selected "
                "its own device, so every rank uses cuda:0",
                0.88,
                "duplicate-gpu",
                fix="torch.cuda.set_device(int(os.environ['LOCAL_RANK'])) before anything "
                "touches CUDA, and .to(f'cuda:{local_rank}') rather than .cuda() / 'cuda'",
            ).cited(gpu_rows + [line for *_, line in procs])
        ]
    extra = [
        pid
        for pid, where in on.items()
        if len(where) > 1 and 0 in where and min(where, key=lambda gpu: where[gpu]) == 0
    ]
    if len(extra) >= 2:
        return [
            Explained(
                KIND_DEVICE_NOT_SET,
                f"{len(extra)} processes each hold a small extra context on GPU 0 besides their "
                "own GPU: something touched cuda:0 before set_device (torch.load without "
                "map_location, a tensor created with device='cuda' early)",
                0.65,
                "duplicate-gpu",
                fix="set the device first thing; torch.load(..., map_location='cpu')",
                severity="warning",
            ).cited([line for *_, line in procs])
        ]
    return []


def read(lines: list[Line]) -> list[Explained]:
    return _p2p(lines) + _smi(lines)
