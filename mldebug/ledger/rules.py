"""The collective ledger's contract: how a process group is named, which ops must match
across ranks, how every source names an op, what state.json holds and when it is fresh.

Stdlib only and free of imports from the package: the agent loads this file by its path
inside every rank (as it loads rankrules.py), and the outside imports it as
`mldebug.ledger.rules`. The agent's writer, the reader (collect/agentstate.py), the
comparer (mldebug/ledger/compare.py) and every source's adapter use these rules, so a group's name,
an op's name or a heartbeat's age means the same on both sides.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable, Mapping

# ---- Groups ------------------------------------------------------------------------------

DEFAULT_GROUP = "default_pg"  # the world's group, by every source's name for it
RANKS_PREFIX = "ranks:"  # a group torch did not number, named by its global ranks
MAX_GROUP_NAME = 200  # longer `ranks:` names become `ranks:<count>#<digest>`


def ranks_group_name(ranks: Iterable[int]) -> str:
    """`ranks:0-3,8,10-11` for a group's global ranks (the same on every member); a list
    too long for a name becomes `ranks:<count>#<16 hex digits>`, its members unknown."""
    ordered = sorted(set(ranks))
    parts: list[str] = []
    start = None
    for i, rank in enumerate(ordered):
        if start is None:
            start = rank
        if i + 1 == len(ordered) or ordered[i + 1] != rank + 1:
            parts.append(str(start) if start == rank else f"{start}-{rank}")
            start = None
    name = RANKS_PREFIX + ",".join(parts)
    if len(name) > MAX_GROUP_NAME:
        digest = hashlib.sha1(name.encode(), usedforsecurity=False).hexdigest()[:16]
        name = f"{RANKS_PREFIX}{len(ordered)}#{digest}"
    return name


def ranks_of_group(name: str, limit: int = 1 << 20) -> frozenset[int] | None:
    """The members a `ranks:` name lists (`ranks:0-3,8` -> {0,1,2,3,8}); None for any other
    name, a digest name or a malformed one (its members are then those that called on it).
    `limit` caps the ranks a range may expand to: a name is data from a rank."""
    if not name.startswith(RANKS_PREFIX) or "#" in name:
        return None
    members: set[int] = set()
    for part in name[len(RANKS_PREFIX) :].split(","):
        low, dash, high = part.partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            return None
        first, last = int(low), int(high) if dash else int(low)
        if last < first or last - first + len(members) >= limit:
            return None
        members.update(range(first, last + 1))
    return frozenset(members)


def group_of_entry(name: str, desc: str) -> str:
    """The agent's name of a group torch names (`process_group` of a Flight Recorder
    entry, the watchdog's `PG ID 0 PG GUID 0(default_pg)`): default_pg for the world,
    torch's number when it counted the group out, else its description or name."""
    if desc == DEFAULT_GROUP:
        return DEFAULT_GROUP
    if name.isdigit() or not desc or desc == "undefined":
        return name
    return desc


# ---- Ops ---------------------------------------------------------------------------------

# Point-to-point ops: numbered per pair of ranks, never compared as a group's collective.
P2P_OPS = frozenset(
    {
        "send",
        "recv",
        "isend",
        "irecv",
        "batch_isend_irecv",
        "send_object_list",
        "recv_object_list",
        "recv_any_source",
    }
)
# Ops whose tensors have the same shape and dtype on every member. The others legitimately
# differ: gather/scatter lists exist on the root only, all_to_all splits are uneven, object
# collectives pickle to any size. An allowlist: an op not known here is never called a
# shape mismatch (the cost is a missed finding, never a false one).
SAME_SHAPE_OPS = frozenset(
    {
        "all_reduce",
        "all_reduce_coalesced",
        "broadcast",
        "reduce",
        "all_gather_into_tensor",
        "reduce_scatter_tensor",
        "all_gather_into_tensor_coalesced",
        "reduce_scatter_tensor_coalesced",
        "barrier",
    }
)
# Where a source records the inputs alone (the Flight Recorder's input_sizes), more ops must
# match: every member passes the same input to these; only their outputs (the root's list)
# differ. The agent records every tensor argument, outputs included, so not these.
SAME_INPUT_OPS = SAME_SHAPE_OPS | frozenset(
    {
        "all_gather",
        "all_gather_coalesced",
        "all_gather_single",
        "reduce_scatter",
        "reduce_scatter_single",
        "gather",
        "_broadcast_oop",
        "_reduce_oop",
    }
)
# all_to_all: the members' input totals equal their output totals (torch's analyser checks it).
ALL_TO_ALL_OPS = frozenset({"all_to_all", "all_to_all_single"})

# Every source's spelling of an op, to the torch.distributed name the agent records.
# torch's Flight Recorder: profiling_name `nccl:all_reduce`, `gloo:all_gather`, the
# underscore bases; NCCL's watchdog: `OpType=ALLREDUCE`; NCCL's RAS: `AllReduce`.
_OP_NAMES = {
    "allreduce": "all_reduce",
    "allreduce_coalesced": "all_reduce_coalesced",
    "allreduce_sparse": "all_reduce",
    "allgather": "all_gather",
    "_allgather_base": "all_gather_into_tensor",
    "allgather_base": "all_gather_into_tensor",
    "_all_gather_base": "all_gather_into_tensor",
    "all_gather_base": "all_gather_into_tensor",
    "allgather_into_tensor_coalesced": "all_gather_into_tensor_coalesced",
    "allgather_coalesced": "all_gather_coalesced",
    "reducescatter": "reduce_scatter",
    "_reduce_scatter_base": "reduce_scatter_tensor",
    "reduce_scatter_base": "reduce_scatter_tensor",
    "reduce_scatter_tensor_coalesced": "reduce_scatter_tensor_coalesced",
    "alltoall": "all_to_all",
    "alltoall_base": "all_to_all_single",
    "all_to_all_base": "all_to_all_single",
    "recvanysource": "recv_any_source",
    "coalesced": "coalesced",
    "sendrecv": "send",
    "bcast": "broadcast",
}
_BACKENDS = ("nccl:", "gloo:", "mpi:", "ucc:", "xccl:", "fake:")


@functools.lru_cache(maxsize=4096)  # a few spellings, asked for in every entry of a dump
def op_name(name: str) -> str:
    """The torch.distributed name of an op as any source spells it: `nccl:all_reduce`,
    `ALLREDUCE`, `AllReduce`, `_allgather_base`, `all_reduce` -> `all_reduce`; a p2p FR name
    (`send 0->1`) loses its peers (p2p_peers has them). An unknown name is kept, lowercased."""
    text = name.strip()
    lowered = text.lower()
    for prefix in _BACKENDS:
        if lowered.startswith(prefix):
            text = text[len(prefix) :]
            break
    text = text.split(" ", 1)[0].lower()  # ALLREDUCE, AllReduce: no word breaks to keep
    return _OP_NAMES.get(text, text)


def p2p_peers(name: str) -> tuple[int, int] | None:
    """(source rank, destination rank) a Flight Recorder p2p name carries (`nccl:send 0->1`,
    `nccl:recv 0<-1`): the ranks are the group's own."""
    _, _, tail = name.partition(" ")
    for arrow, flip in (("->", False), ("<-", True)):
        left, found, right = tail.partition(arrow)
        if found and left.strip().isdigit() and right.strip().isdigit():
            a, b = int(left), int(right)
            return (b, a) if flip else (a, b)
    return None


def is_p2p(op: str) -> bool:
    return op_name(op) in P2P_OPS


def same_shape_expected(op: str, inputs_only: bool = False) -> bool:
    """Must every member pass tensors of the same shapes to `op`? `inputs_only`: the shapes
    are the op's inputs alone (the Flight Recorder), not every tensor argument."""
    return op_name(op) in (SAME_INPUT_OPS if inputs_only else SAME_SHAPE_OPS)


# c10 ScalarType names (Flight Recorder, `Float`) to torch's dtype names (the agent, `float32`).
_DTYPES = {
    "float": "float32",
    "double": "float64",
    "half": "float16",
    "bfloat16": "bfloat16",
    "long": "int64",
    "int": "int32",
    "short": "int16",
    "char": "int8",
    "byte": "uint8",
    "bool": "bool",
    "complexfloat": "complex64",
    "complexdouble": "complex128",
    "float8_e4m3fn": "float8_e4m3fn",
    "float8_e5m2": "float8_e5m2",
}


def dtype_name(name: str) -> str:
    """torch's name of a dtype as any source spells it: `Float`, `torch.float32` -> float32."""
    text = name.strip().removeprefix("torch.")
    return _DTYPES.get(text.lower(), text)


# ---- state.json --------------------------------------------------------------------------

STATE_VERSION = 1
# The sections the agent writes and the reader checks (docs/agent.md). The schema is open:
# a reader ignores keys it does not know, so a newer agent may add top-level sections (the
# per-collective `timing`, a longer memory history) without a version change; the version
# changes only when a known key changes its meaning or type.
STATE_KEYS = (
    "version",
    "rank",
    "pid",
    "time",
    "interval",
    "started",
    "step",
    "step_time",
    "groups",  # {group name: {"size", "enqueued": call, "completed": call}}
    "trace",  # [call, ...] oldest first: {"group", "seq", "op", "site", "enqueued", ...}
    "memory",
    "memory_history",
    "flight_recorder",  # optional: {group: {"last": {...}, "pending": n}}
    # optional: {"tid", "run_delay", "main_run_delay"}: seconds waited for a CPU so far, and
    # "step_main_run_delay": the main thread's at the start of its step under way;
    # "threads": [[tid, run_delay], ...] of its other Python threads
    "beat",
)


def is_state(data: object, rank: int) -> bool:
    """A state.json of this version and this rank (any further keys allowed)."""
    return (
        isinstance(data, Mapping)
        and data.get("version") == STATE_VERSION
        and data.get("rank") == rank
    )


# ---- Freshness ---------------------------------------------------------------------------

DEFAULT_INTERVAL = 1.0  # MLDEBUG_HEARTBEAT's default, for a state that does not say
STALE_INTERVALS = 5
STALE_MIN_SECONDS = 10.0
# One rule for "the agent still writes": a heartbeat is stale after 5 intervals, and never
# before 10 s. The heartbeat thread needs the GIL; a rank in a long GIL-holding call that is
# no hang (a multi-second torch.load, a big pickle) or a machine under load delays it by
# seconds. What hangs on staleness is a frozen-rank error and leaving a rank's stack unread,
# so the rule errs to the late side: a stale verdict comes a few seconds later, never wrongly.


def stale_after(interval: float | None) -> float:
    """Seconds a heartbeat may age before what the state says is no longer news."""
    beat = interval if interval is not None and interval > 0 else DEFAULT_INTERVAL
    return max(STALE_MIN_SECONDS, STALE_INTERVALS * beat)


def is_fresh(age: float | None, interval: float | None) -> bool:
    """A heartbeat `age` seconds old (None: unknown) is fresh."""
    return age is not None and age <= stale_after(interval)
