"""NCCL's errors as torch raises them ("NCCL error in: ..., internal error ..., NCCL version
X", "ncclInternalError: Internal check failed.", "Last error:" and the line after it) and the
WARN lines that explain them: "Duplicate GPU detected : rank 1 and rank 0 both on CUDA
device 4f000", "Cuda failure 'out of memory'" / "Failed to CUDA calloc N bytes" (an OOM
inside NCCL that reads like a network error), and the ranks of one host whose communicator
lines show the same busId. Formats from NCCL's include/checks.h, init.cc, include/alloc.h
and torch's NCCLUtils.hpp.
"""

from __future__ import annotations

import re

from mldebug.explain.catalog import OWN
from mldebug.explain.finding import (
    KIND_DUPLICATE_GPU,
    KIND_NCCL_CUDA_OOM,
    KIND_NCCL_ERROR,
    Explained,
)
from mldebug.explain.text import Line
from mldebug.ranges import format_ranks

RECIPE_DUPLICATE = "duplicate-gpu"
RECIPE_OOM = "cuda-oom-nccl"
RECIPE_WARNINGS = "nccl-warnings"
RECIPE_IFACE = "network-interface"
RECIPE_P2P = "broken-p2p"
RECIPE_CONNECTION = "connection-refused"
RECIPE_INIT = "nccl-init-failure"

_DUPLICATE = re.compile(
    r"Duplicate GPU detected ?: rank (?P<a>\d+) and rank (?P<b>\d+) both on CUDA device (?P<dev>\w+)"
)
_CUDA_OOM = re.compile(
    r"Cuda failure (?:\d+ )?'out of memory'|Failed to CUDA calloc (?P<bytes>\d+) bytes"
)
_RESULT = re.compile(
    r"\b(?P<code>ncclInternalError|ncclSystemError|ncclUnhandledCudaError|ncclInvalidUsage|"
    r"ncclInvalidArgument|ncclRemoteError)\b"
    r"|NCCL error in: \S+, (?P<words>internal error|unhandled system error|unhandled cuda error|"
    r"invalid usage|invalid argument|remote process exited or there was a network error)"
)
_WORDS = {
    "internal error": "ncclInternalError",
    "unhandled system error": "ncclSystemError",
    "unhandled cuda error": "ncclUnhandledCudaError",
    "invalid usage": "ncclInvalidUsage",
    "invalid argument": "ncclInvalidArgument",
    "remote process exited or there was a network error": "ncclRemoteError",
}
_COMM = re.compile(
    r"^(?P<host>[^\s:]+):\d+:\d+ .*?comm 0x[0-9a-f]+ rank (?P<rank>\d+) nranks (?P<n>\d+) "
    r"cudaDev (?P<dev>\d+)(?: nvmlDev \d+)? busId (?P<bus>[0-9a-fA-F]+)"
)
# What the last error says, and where that points: first match wins.
_CAUSES = (
    ("Duplicate GPU", RECIPE_DUPLICATE, "two ranks of one node drive the same GPU"),
    ("out of memory", RECIPE_OOM, "NCCL could not allocate GPU memory for its buffers"),
    ("calloc", RECIPE_OOM, "NCCL could not allocate GPU memory for its buffers"),
    ("ncclSocketInit", RECIPE_IFACE, "NCCL had no usable socket interface"),
    ("no socket interface", RECIPE_IFACE, "NCCL had no usable socket interface"),
    ("Bootstrap", RECIPE_IFACE, "the bootstrap between ranks failed"),
    ("shared memory", RECIPE_INIT, "/dev/shm is too small (a container's default 64 MB)"),
    ("/dev/shm", RECIPE_INIT, "/dev/shm is too small (a container's default 64 MB)"),
    ("peer access", RECIPE_P2P, "GPU peer-to-peer access failed"),
    ("cudaIpc", RECIPE_P2P, "GPU peer-to-peer (CUDA IPC) failed"),
    ("P2P", RECIPE_P2P, "GPU peer-to-peer failed"),
    ("Connection refused", RECIPE_CONNECTION, "a peer refused the connection"),
    ("Connection closed", RECIPE_CONNECTION, "a peer closed the connection (it exited first)"),
    ("remote process", RECIPE_CONNECTION, "a peer exited or the network failed"),
    ("socket", RECIPE_IFACE, "a socket between ranks failed"),
)


def _known(last: str) -> tuple[str | None, str] | None:
    """What the catalog says of NCCL's "Last error:" message, when it knows it."""
    for message in OWN:
        if message.cue in last:
            match = message.pattern.search(last)
            if match:
                parts = {k: v for k, v in match.groupdict().items() if v is not None}
                return message.recipe_for(parts), message.meaning
    return None


def _ranks(lines: list[Line]) -> tuple[int, ...]:
    return tuple(sorted({line.rank for line in lines if line.rank is not None}))


def _duplicates(lines: list[Line]) -> list[Explained]:
    searched = [
        (line, _DUPLICATE.search(line.text)) for line in lines if "Duplicate GPU" in line.text
    ]
    hits = [(line, m) for line, m in searched if m is not None]
    if hits:
        named = sorted({int(m.group(g)[:6]) for _, m in hits for g in ("a", "b")})
        devices = sorted({m.group("dev") for _, m in hits})
        return [
            Explained(
                KIND_DUPLICATE_GPU,
                f"ranks {format_ranks(named)} run on the same GPU (busId {', '.join(devices[:4])}): "
                "NCCL refuses two ranks of one communicator on one device (Duplicate GPU "
                "detected); each process did not select its own GPU before NCCL started",
                0.97,
                RECIPE_DUPLICATE,
                fix="call torch.cuda.set_device(int(os.environ['LOCAL_RANK'])) before "
                "init_process_group (or pass device_id=); do not set CUDA_VISIBLE_DEVICES to "
                "one GPU for every rank; start as many ranks per node as it has GPUs",
                ranks=tuple(named),
                note="NCCL names pairs of ranks; every rank on that node may share the device",
            ).cited([line for line, _ in hits])
        ]
    by_bus: dict[tuple[str, str], dict[int, Line]] = {}
    for line in lines:
        if "busId" not in line.text:
            continue
        comm = _COMM.search(line.text)
        if comm:
            key = (comm.group("host"), comm.group("bus"))
            by_bus.setdefault(key, {})[int(comm.group("rank")[:6])] = line
    shared = {key: ranks for key, ranks in by_bus.items() if len(ranks) > 1}
    if shared:
        (host, bus), ranks = next(iter(shared.items()))
        return [
            Explained(
                KIND_DUPLICATE_GPU,
                f"ranks {format_ranks(ranks)} on {host} all open their communicator on busId "
                f"{bus}: they share one GPU",
                0.88,
                RECIPE_DUPLICATE,
                fix="call torch.cuda.set_device(LOCAL_RANK) before init_process_group in every "
                "rank",
                ranks=tuple(sorted(ranks)),
            ).cited(list(ranks.values()))
        ]
    return []


def _oom(lines: list[Line]) -> list[Explained]:
    hits = [line for line in lines if ("Cuda failure" in line.text or "CUDA calloc" in line.text)]
    hits = [line for line in hits if _CUDA_OOM.search(line.text)]
    if not hits:
        return []
    size = next(
        (
            m.group("bytes")
            for line in hits
            for m in [_CUDA_OOM.search(line.text)]
            if m and m.group("bytes")
        ),
        None,
    )
    return [
        Explained(
            KIND_NCCL_CUDA_OOM,
            "NCCL ran out of GPU memory setting up its buffers (Cuda failure 'out of memory'"
            + (f", {int(size):,} bytes" if size else "")
            + "): the GPU was full when a communicator or a new peer connection was made; the "
            "errors that follow (socket, proxy, remote errors) are its consequence",
            0.92,
            RECIPE_OOM,
            fix="leave room for NCCL: lower the memory the step holds (batch, activation "
            "checkpointing), free cached blocks before the first collective of a new group, or "
            "lower NCCL_BUFFSIZE / NCCL_NCHANNELS_PER_NET_PEER",
            ranks=_ranks(hits),
        ).cited(hits)
    ]


def _results(lines: list[Line], claimed: dict[str, list[Line]]) -> list[Explained]:
    """torch's NCCL errors; one a finding of its own already explains (a duplicate GPU,
    NCCL's OOM) adds its lines to that finding's instead."""
    found: list[Explained] = []
    seen: set[tuple[str, str]] = set()
    for index, line in enumerate(lines):
        if "nccl" not in line.text and "NCCL" not in line.text:
            continue
        match = _RESULT.search(line.text)
        if not match:
            continue
        code = match.group("code") or _WORDS[match.group("words")]
        last = ""
        cited = [line]
        for follow, later in enumerate(lines[index + 1 : index + 6], index + 2):
            if later.text.strip().startswith("Last error"):
                tail = later.text.split("Last error:", 1)[-1].strip()
                if not tail and follow < len(lines):  # the message is on the next line
                    tail = lines[follow].text.strip()
                    cited.append(lines[follow])
                last = tail[:300]
                cited.append(later)
                break
        cause = next(((r, why) for word, r, why in _CAUSES if word in last), None) or _known(last)
        key = (code, last[:60])
        if key in seen:
            continue
        seen.add(key)
        recipe, why = cause if cause else (RECIPE_WARNINGS, "")
        if recipe in claimed:
            claimed[recipe].extend(cited)
            continue
        found.append(
            Explained(
                KIND_NCCL_ERROR,
                f"NCCL failed with {code}"
                + (f': "{last}"' if last else "")
                + (f": {why}" if why else "")
                + (
                    ""
                    if last
                    else "; NCCL's WARN line before it says why (NCCL_DEBUG=WARN shows it)"
                ),
                0.85 if last else 0.6,
                recipe,
                fix="read NCCL's WARN line for the call that failed (NCCL_DEBUG=INFO on every "
                "rank shows it)"
                if not cause
                else "",
                ranks=line.ranks,
                note=""
                if last
                else 'the paste has no "Last error:" line: the cause is in NCCL\'s WARN output',
            ).cited(cited)
        )
    return found[:3]


def read(lines: list[Line]) -> list[Explained]:
    found = _duplicates(lines) + _oom(lines)
    claimed: dict[str, list[Line]] = {f.recipe: [] for f in found if f.recipe}
    results = _results(lines, claimed)
    by_where = {line.where: line for line in lines}
    found = [
        f.cited([by_where[w] for w in f.lines] + claimed.get(f.recipe or "", [])) for f in found
    ]
    return found + results
