"""Rules shared by the in-rank agent and the outside: which rank a process is, which
frames are the user's own code, and how a frame and a byte count are named for people.

Stdlib only and free of imports from the package: the agent loads this file by its path
inside every rank (the rank may run in another environment than mldebug), and the
collectors, the analysis and the views import it as `mldebug.rankrules`. One copy of each
rule, so the agent and `dump` never disagree about a rank or a frame.
"""

from __future__ import annotations

import re
import signal
import socket
import struct
from collections.abc import Iterable, Mapping
from functools import lru_cache
from pathlib import Path

TYPE_CHECKING = False  # typing is not imported in ranks; mypy reads this block
if TYPE_CHECKING:
    from typing import Any

# (rank, local rank, world size) as torchrun, Open MPI, MPICH/Intel MPI and Slurm name them,
# most specific launcher first.
RANK_VARIABLES = (
    ("RANK", "LOCAL_RANK", "WORLD_SIZE"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("PMI_RANK", "MPI_LOCALRANKID", "PMI_SIZE"),
    ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS"),
)


def env_int(value: str | None) -> int | None:
    """An environment variable's integer, None when unset, empty or not a number."""
    if value is None or not value.strip():
        return None
    try:
        return int(value)
    except ValueError:
        return None


def rank_identity(env: Mapping[str, str]) -> tuple[int, int | None, int | None] | None:
    """(rank, local rank, world size) from the first scheme whose rank variable holds a
    rank (a number from 0); None for a process that is no rank."""
    for rank_name, local_name, size_name in RANK_VARIABLES:
        rank = env_int(env.get(rank_name))
        if rank is not None and rank >= 0:
            return rank, env_int(env.get(local_name)), env_int(env.get(size_name))
    return None


# The torch.distributed functions a rank's collectives go through: what the agent traces
# (by sequence number per group) and what a stack in them is waiting in.
COLLECTIVE_CALLS = (
    "all_reduce",
    "all_reduce_coalesced",
    "all_gather",
    "all_gather_single",
    "all_gather_into_tensor",
    "all_gather_coalesced",
    "all_gather_object",
    "broadcast",
    "broadcast_object_list",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_single",
    "reduce_scatter_tensor",
    "all_to_all",
    "all_to_all_single",
    "barrier",
    "monitored_barrier",
    "gather",
    "gather_object",
    "scatter",
    "scatter_object_list",
)
POINT_TO_POINT_CALLS = (
    "send",
    "recv",
    "isend",
    "irecv",
    "send_object_list",
    "recv_object_list",
    "batch_isend_irecv",
)

_LIBRARY_MARKERS = ("/site-packages/", "/dist-packages/", "/torch/")
# mldebug's own files (hooks, agent) by their real place, not by a "/mldebug/" path part:
# run directories live under ~/.local/state/mldebug/ and hold user code (the demo job).
_MLDEBUG_DIR = str(Path(__file__).resolve().parent) + "/"
_C10D_FILE = "torch/distributed/distributed_c10d.py"
_STDLIB = re.compile(r"/lib/python\d+(\.\d+)?/")
# Modules torch inductor generates into its cache (torch/_inductor/codecache.py get_path:
# <cache>/<key[1:3]>/<key>.py, the key "c" and 51 base32 characters): torch's, not the user's.
_INDUCTOR_MODULE = re.compile(r"/([a-z0-9]{2})/c\1[a-z0-9]{49}\.py$")


def is_library_path(path: str) -> bool:
    """Standard library, installed packages, torch (with the modules inductor generates),
    mldebug itself, or no file at all."""
    if not path or path.startswith("<frozen") or path == "?":  # "<string>" is `python -c` code
        return True
    if any(marker in path for marker in _LIBRARY_MARKERS) or path.startswith(_MLDEBUG_DIR):
        return True
    # The standard library: .../lib/python3.X/<module> (venvs and distro layouts alike).
    return _STDLIB.search(path) is not None or _INDUCTOR_MODULE.search(path) is not None


def short_path(path: str) -> str:
    """Drop the install prefix of library paths: .../site-packages/torch/x.py -> torch/x.py."""
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in path:
            return path.rsplit(marker, 1)[1]
    return path


def is_user_frame(frame: Any) -> bool:
    """A frame (anything with `file` and `native`) of the user's own code."""
    return not frame.native and not is_library_path(frame.file)


def is_torch_collective(frame: Any) -> bool:
    """A frame of torch.distributed's own collective or point-to-point call (not a wrapper
    of it, mldebug's included): where a rank waits, worth showing when frames are folded."""
    name = frame.function.rsplit(".", 1)[-1]
    return (
        not frame.native
        and frame.file.endswith(_C10D_FILE)
        and (name in COLLECTIVE_CALLS or name in POINT_TO_POINT_CALLS)
    )


# torch.compile's entry points, innermost first (the phase under way wins): a stack through
# one of them is compiling (py-spy dumps of real inductor compiles, tests/data/compiling).
# Running a compiled function passes through none of them (eval_frame.py, the generated
# module's `call`, aot_autograd's runtime wrappers are not listed). The agent samples its
# main thread with this table; the analysis reads py-spy's stacks with it.
COMPILE_FILES = (
    ("triton/compiler/compiler.py", "triton"),
    ("torch/_inductor/cpp_builder.py", "torch._inductor (C++ build)"),
    ("torch/_inductor/async_compile.py", "torch._inductor"),
    ("torch/_inductor/select_algorithm.py", "torch._inductor (autotuning)"),
    ("torch/_inductor/compile_fx.py", "torch._inductor"),
    ("torch/_dynamo/symbolic_convert.py", "torch._dynamo (tracing)"),
    ("torch/_dynamo/convert_frame.py", "torch._dynamo"),
    ("torch/__init__.py", "torch.compile (set-up)"),  # its function `compile` only
)
_COMPILE_ENDINGS = tuple(ending for ending, _ in COMPILE_FILES)
# In these files only these functions compile: `torch.compile(model)` itself imports
# inductor (seconds; a real job's rank sat there 20 s on a loaded machine).
_COMPILE_FUNCTIONS = {"torch/__init__.py": frozenset({"compile"})}


@lru_cache(maxsize=4096)  # a heartbeat asks about the same few hundred frames each second
def compile_phase_of(path: str, function: str) -> str | None:
    """What compiles in this function of a file of this path (COMPILE_FILES), or None. A
    module's own body (`<module>`) is its import, not a compile (an import that
    `torch.compile` makes is seen by its `compile` frame further out)."""
    if function == "<module>" or not path.endswith(_COMPILE_ENDINGS):
        return None
    for ending, phase in COMPILE_FILES:
        if path.endswith(ending):
            only = _COMPILE_FUNCTIONS.get(ending)
            if only is not None and function.rsplit(".", 1)[-1] not in only:
                return None
            return phase
    return None


def compile_phase_in(frames: Iterable[tuple[str, str]]) -> str | None:
    """What compiles on a stack of (file, function) pairs, outermost first: the phase of the
    innermost compile frame. Frames under an import (importlib's frames) do not count:
    importing torch._dynamo runs its modules' and classes' bodies, which is no compile;
    under `torch.compile`, its frame further out already said so."""
    phase = None
    for path, function in frames:
        if path.startswith("<frozen importlib"):
            break
        found = compile_phase_of(path, function)
        if found is not None:
            phase = found
    return phase


def frame_label(frame: Any) -> str:
    """`function (file:line)` with the path shortened for people."""
    if frame is None:
        return "?"
    where = short_path(frame.file)
    if frame.line is not None:
        where = f"{where}:{frame.line}"
    return f"{frame.function} ({where})"


def human_bytes(size: float | None, compact: bool = False) -> str:
    """A byte count for people: "512 B", "1.5 MiB", "3.2 GiB" (binary units, up to TiB);
    compact for narrow table columns: "512B", "1.5M", "3.2G". None is "-". The agent's
    events and the outside's verdicts word sizes alike (wording.human_bytes is this one)."""
    if size is None:
        return "-"
    units = ("B", "K", "M", "G", "T") if compact else ("B", "KiB", "MiB", "GiB", "TiB")
    sep = "" if compact else " "
    size = float(size)
    for unit in units:
        if abs(size) < 1024 or unit == units[-1]:
            return f"{size:.0f}{sep}{unit}" if unit == "B" else f"{size:.1f}{sep}{unit}"
        size /= 1024
    raise AssertionError("unreachable")


# Real-time signals seldom used by programs or libraries (glibc keeps the lowest ones): the
# agent registers the first free one with faulthandler (agent/stacksignal.py), and `dump`
# never sends any other, whatever a rank's proc.json says (collect/rankstacks.py).
STACK_SIGNAL_OFFSETS = (3, 4, 5)  # below SIGRTMAX


def stack_signals() -> tuple[int, ...]:
    """The signals that may make a rank write its stacks, in the order the agent tries them."""
    top = getattr(signal, "SIGRTMAX", None)
    return tuple(int(top) - offset for offset in STACK_SIGNAL_OFFSETS) if top is not None else ()


# The abstract Unix socket on which the agent's thread answers with the rank's stacks
# (agent/stackthread.py, collect/rankstacks.py): named after the process, its start time
# included, so a reused pid never answers for another.
PEER_CREDENTIALS = struct.Struct("3i")  # struct ucred: pid, uid, gid


def stack_socket_name(pid: int, start_ticks: int) -> bytes:
    """The abstract socket address (a leading NUL: no file) of process `pid`."""
    return f"\0mldebug-stacks/{pid}/{start_ticks}".encode()


def socket_peer(conn: socket.socket) -> tuple[int, int]:
    """(pid, uid) of the process at the other end of a Unix socket, as the kernel vouches."""
    raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, PEER_CREDENTIALS.size)
    pid, uid, _gid = PEER_CREDENTIALS.unpack(raw)
    return pid, uid
