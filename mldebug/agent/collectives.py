"""The rank's collective trace: every torch.distributed collective and point-to-point call.

`install(c10d, tracer)` wraps the public collective functions of
`torch.distributed.distributed_c10d` (the post-import hook calls it the moment that module
has executed, so `torch.distributed` re-exports the wrapped ones), and their aliases on
`torch.distributed` when torch was imported before the agent. Each call made by the
program gets, per process group, a sequence number from 1, its op, the shapes and dtypes
of its tensors, the user's call site and the time it was enqueued; it completes:

  * when it returns, for a synchronous call on a blocking backend (gloo, MPI);
  * when the heartbeat thread sees the `Work` it returned complete (`is_completed()`,
    never `wait()`), for `async_op=True` calls, isend/irecv and batch_isend_irecv;
  * when a CUDA event recorded on the current stream right after it returned is reached,
    for a synchronous call on CUDA tensors (NCCL returns before the data has moved);
  * when it raises: the exception goes on to the program unchanged, the call carries it
    as `error`.

A group's `completed` is the last call of an unbroken run of completed calls (a call
still pending holds back the ones after it). Calls made inside another traced call
(`all_gather_object` calling `all_gather`, `send` calling `isend`) are the outer call's
business and are not counted: every rank makes the same outer calls, so sequence numbers
match across ranks. Deprecated functions (`all_gather_into_tensor`...) are left unwrapped,
so the FutureWarning torch gives still names the program's line; what they call inside
(`all_gather_single`) is traced instead.

Not seen: collectives that C++ issues by itself (DDP's gradient buckets), and the
functional collectives of compiled code.

The wrapper runs on every step: it does a thread-local check, a dict lookup for the group,
a bounded look at the tensor arguments, a walk up the stack to the first frame of the
user's own file (file names judged once), and appends to a ring buffer under a lock.
"""

from __future__ import annotations

import functools
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .eventlog import fail, fault_point
from .siblings import sibling as _sibling

if TYPE_CHECKING:
    from collections.abc import Iterable
    from types import FrameType, ModuleType

PART = "collectives"
TRACE_LEN = 64
MAX_TENSORS = 16
MAX_PENDING = 4096
INLINE_POLL = 8  # pending calls a synchronous call looks at when it returns
MAX_STACK = 64


# The collective ledger's contract (mldebug/ledger/rules.py, loaded by path as rankrules is):
# the group names the outside parses.
_rules = _sibling("ledger.rules")
DEFAULT_GROUP = _rules.DEFAULT_GROUP
MAX_GROUP_NAME = _rules.MAX_GROUP_NAME

ALWAYS_ASYNC = frozenset({"isend", "irecv", "batch_isend_irecv"})
PEER_ARGUMENTS = ("dst", "src", "group_dst", "group_src")


class Call:
    """One traced call: what the trace and a group's enqueued/completed entry show."""

    __slots__ = (
        "group",
        "seq",
        "op",
        "site",
        "enqueued",
        "completed",
        "asynchronous",
        "shapes",
        "dtypes",
        "peer",
        "error",
        "waits",
    )

    def __init__(
        self,
        group: Group,
        seq: int,
        op: str,
        site: str | None,
        enqueued: float,
        asynchronous: bool,
        shapes: list[list[int]],
        dtypes: list[str],
        peer: Any,
    ) -> None:
        self.group = group
        self.seq = seq
        self.op = op
        self.site = site
        self.enqueued = enqueued
        self.completed: float | None = None
        self.asynchronous = asynchronous
        self.shapes = shapes
        self.dtypes = dtypes
        self.peer = peer
        self.error: str | None = None
        self.waits: list | None = None  # the Work objects / CUDA events it completes with

    def trace_entry(self) -> dict:
        """The call in state.json's `trace`."""
        return self._entry(group=self.group.name, enqueued=self.enqueued, completed=self.completed)

    def enqueued_entry(self) -> dict:
        """The call as a group's last made one (`groups.<name>.enqueued`)."""
        return self._entry(time=self.enqueued)

    def _entry(self, **when: object) -> dict:
        """What state.json says of every call made, with `when` (its group and times)."""
        entry = {
            "seq": self.seq,
            "op": self.op,
            "site": self.site,
            "async": self.asynchronous,
            "shapes": self.shapes,
            "dtypes": self.dtypes,
            **when,
        }
        self._extras(entry)
        return entry

    def completed_entry(self) -> dict:
        entry = {"seq": self.seq, "op": self.op, "time": self.completed}
        if self.error is not None:
            entry["error"] = self.error
        return entry

    def _extras(self, entry: dict) -> None:
        if self.peer is not None:
            entry["peer"] = self.peer
        if self.error is not None:
            entry["error"] = self.error


class Group:
    __slots__ = ("name", "size", "seq", "enqueued", "completed", "early")

    def __init__(self, name: str, size: int | None) -> None:
        self.name = name
        self.size = size
        self.seq = 0
        self.enqueued: Call | None = None
        self.completed: Call | None = None
        self.early: dict[int, Call] = {}  # completed while an earlier call is pending

    def done(self, call: Call) -> None:
        """`call` completed: move `completed` along the unbroken run of completed calls."""
        last = self.completed.seq if self.completed is not None else 0
        if call.seq <= last:
            return
        if call.seq != last + 1:
            self.early[call.seq] = call
            return
        self.completed = call
        while self.completed.seq + 1 in self.early:
            self.completed = self.early.pop(self.completed.seq + 1)

    def entry(self) -> dict:
        entry: dict[str, object] = {"size": self.size}
        if self.enqueued is not None:
            entry["enqueued"] = self.enqueued.enqueued_entry()
        if self.completed is not None:
            entry["completed"] = self.completed.completed_entry()
        return entry


def user_site(
    frame: FrameType | None,
    files: dict[str, bool],
    is_library: Callable[[str], object],
    skip: str | None = None,
) -> str | None:
    """file:line of the innermost frame of the user's own code, from `frame` out. `files`
    caches path -> whether it is a library's; `skip`: a file of the agent's own to pass."""
    for _ in range(MAX_STACK):
        if frame is None:
            return None
        path = frame.f_code.co_filename
        library = files.get(path)
        if library is None:
            library = files[path] = bool(is_library(path)) or path == skip
        if not library:
            return f"{path}:{frame.f_lineno}"
        frame = frame.f_back
    return None


def format_ranks(ranks: Iterable[int]) -> str:
    """`ranks:0-3,8,10-11` for a group's global ranks; a digest for very long lists."""
    return _rules.ranks_group_name(ranks)


class _Local(threading.local):
    inside = False  # this thread is inside a traced call


class Tracer:
    """The trace of one rank. `rules` tell library files from the user's own and name the
    functions to trace;
    `tensor_type`, `work_type`, `cuda` and `c10d` come from the program's torch."""

    def __init__(self, rules: ModuleType, clock: Callable[[], float] = time.time) -> None:
        # rules: mldebug/rankrules.py (as loaded in the rank), for which files are library
        # files and which torch.distributed functions are traced
        self.is_library = rules.is_library_path
        self.calls = (*rules.COLLECTIVE_CALLS, *rules.POINT_TO_POINT_CALLS)
        self.point_to_point = frozenset(rules.POINT_TO_POINT_CALLS)
        self.clock = clock
        self.lock = threading.Lock()
        self.local = _Local()
        self.off = False
        self.trace: deque[Call] = deque(maxlen=TRACE_LEN)
        self.groups: dict[str, Group] = {}
        self.pending: deque[Call] = deque()
        # called when a call starts waiting for its Work (the heartbeat)
        self.on_pending: Callable[[], object] | None = None
        self.on_done: Callable[[Call], None] | None = (
            None  # called with each completed call, under the lock (agent/timing.py)
        )
        self._by_pg: dict[int, tuple] = {}  # id(pg) -> (weakref to pg, Group)
        self._library_files: dict[str, bool] = {}
        self._dtype_names: dict[object, str] = {}
        self.c10d: Any = None  # the program's torch._C._distributed_c10d, once it is there
        self.tensor_type: Any = None
        self.work_type: Any = None
        self.cuda: Any = None
        self.pg_type: Any = None

    # ------------------------------------------------------------------ what torch is
    def bind(self, c10d: Any, torch: Any) -> None:
        self.c10d = c10d
        self.tensor_type = getattr(torch, "Tensor", None)
        self.work_type = getattr(c10d, "Work", None)
        self.pg_type = getattr(c10d, "ProcessGroup", None)
        self.cuda = getattr(torch, "cuda", None)

    def _default_pg(self) -> Any:
        world = getattr(self.c10d, "_world", None)
        return getattr(world, "default_pg", None)

    def _group(self, pg: Any) -> Group | None:
        """The traced group of a call's `group` argument; None when nothing is traced
        (no default group yet, the rank is no member: torch handles those itself)."""
        if pg is None:
            pg = self._default_pg()
            if pg is None:
                return None
        cached = self._by_pg.get(id(pg))
        if cached is not None and cached[0]() is pg:
            return cached[1]
        if self.pg_type is not None and not isinstance(pg, self.pg_type):
            return None
        name = self._group_name(pg)
        group = self.groups.get(name)
        if group is None:
            try:
                size = int(pg.size())
            except Exception:
                size = None
            group = self.groups[name] = Group(name, size)
        try:
            self._by_pg[id(pg)] = (weakref.ref(pg), group)
        except TypeError:
            pass  # no weak reference: looked up by name each time
        return group

    def _group_name(self, pg: Any) -> str:
        """The same on every rank: default_pg for the world; torch's name when torch
        counted it out (new_group, which every rank calls in the same order); else the
        group's global ranks."""
        if pg is self._default_pg():
            return DEFAULT_GROUP
        name = str(getattr(pg, "group_name", "") or "")
        if name.isdigit():
            return name
        try:
            return format_ranks(self.c10d.get_process_group_ranks(pg))
        except Exception:
            return name[:MAX_GROUP_NAME] or "unknown"

    # ------------------------------------------------------------------ one call
    def site(self, frame: FrameType | None) -> str | None:
        return user_site(frame, self._library_files, self.is_library)

    def _tensors(self, args: tuple, kwargs: dict) -> tuple[list[list[int]], list[str], bool]:
        """Shapes and dtypes of the tensors among the arguments (at most MAX_TENSORS), and
        whether one of them is on a CUDA device."""
        tensor_type = self.tensor_type
        shapes: list[list[int]] = []
        dtypes: list[str] = []
        cuda = False
        found: list[Any] = []
        for value in (*args, *kwargs.values()):
            if tensor_type is not None and isinstance(value, tensor_type):
                found.append(value)
            elif isinstance(value, (list, tuple)):
                for item in value[:MAX_TENSORS]:
                    item = getattr(item, "tensor", item)  # P2POp
                    if tensor_type is not None and isinstance(item, tensor_type):
                        found.append(item)
            if len(found) >= MAX_TENSORS:
                break
        names = self._dtype_names
        for tensor in found[:MAX_TENSORS]:
            shapes.append(list(tensor.shape))
            dtype = tensor.dtype
            name = names.get(dtype)
            if name is None:
                name = names[dtype] = str(dtype).removeprefix("torch.")
            dtypes.append(name)
            cuda = cuda or bool(getattr(tensor, "is_cuda", False))
        return shapes, dtypes, cuda

    def enqueue(
        self,
        op: str,
        args: tuple,
        kwargs: dict,
        group_at: int | None,
        async_at: int | None,
        frame: FrameType | None,
    ) -> tuple[Call, bool] | None:
        fault_point(PART)
        if op == "batch_isend_irecv":
            ops = args[0] if args else kwargs.get("p2p_op_list")
            if not isinstance(ops, list) or not ops:
                return None  # torch refuses it
            pg = getattr(ops[0], "group", None)
        else:
            pg = kwargs.get("group")
            if pg is None and group_at is not None and len(args) > group_at:
                pg = args[group_at]
        group = self._group(pg)
        if group is None:
            return None
        asynchronous = op in ALWAYS_ASYNC
        if not asynchronous and async_at is not None:
            flag = args[async_at] if len(args) > async_at else kwargs.get("async_op")
            asynchronous = bool(flag)
        peer = None
        if op in self.point_to_point and op != "batch_isend_irecv":
            for name in PEER_ARGUMENTS:
                if kwargs.get(name) is not None:
                    peer = kwargs[name]
                    break
            else:
                if len(args) > 1 and isinstance(args[1], int):
                    peer = args[1]
        try:
            shapes, dtypes, cuda = self._tensors(args, kwargs)
        except Exception:
            shapes, dtypes, cuda = [], [], False
        site = self.site(frame)
        now = self.clock()
        with self.lock:
            group.seq += 1
            call = Call(group, group.seq, op, site, now, asynchronous, shapes, dtypes, peer)
            group.enqueued = call
            self.trace.append(call)
        return call, cuda

    def returned(self, call: Call, cuda: bool, result: Any) -> None:
        waits = None
        work_type = self.work_type
        if work_type is not None and isinstance(result, work_type):
            waits = [result]
        elif isinstance(result, list) and result and work_type is not None:
            waits = [w for w in result if isinstance(w, work_type)] or None
        if waits is None and cuda and self.cuda is not None:
            waits = [self._cuda_event()]
        if waits is None:
            self._complete(call, self.clock())
            if self.pending:  # a call after an async one: the earlier ones are likely done
                self.poll(INLINE_POLL)
            return
        with self.lock:
            call.asynchronous = call.asynchronous or waits[0].__class__ is not _CudaMark
            call.waits = waits
            first = not self.pending
            self.pending.append(call)
            if len(self.pending) > MAX_PENDING:
                lost = self.pending.popleft()
                lost.waits = None
                lost.completed = self.clock()
                lost.group.done(lost)
        if first and self.on_pending is not None:
            self.on_pending()

    def _cuda_event(self) -> _CudaMark:
        event = self.cuda.Event()
        event.record()
        return _CudaMark(event)

    def raised(self, call: Call, error: BaseException) -> None:
        call.error = f"{type(error).__name__}: {error}"[:500]
        self._complete(call, self.clock())

    def _complete(self, call: Call, when: float) -> None:
        with self.lock:
            call.completed = when
            call.waits = None
            call.group.done(call)
            self._done(call)

    def _done(self, call: Call) -> None:
        if self.on_done is not None:
            self.on_done(call)

    # ------------------------------------------------------------------ the heartbeat's side
    def poll(self, limit: int | None = None) -> None:
        """Complete the pending calls (the first `limit` of them) whose Work or CUDA event
        is done. Never waits."""
        if not self.pending:
            return
        with self.lock:
            pending = list(self.pending)[:limit]
        finished: list[Call] = []
        for call in pending:
            waits = call.waits
            if waits is None or all(_is_done(w) for w in waits):
                finished.append(call)
        if not finished:
            return
        now = self.clock()
        with self.lock:
            for call in finished:
                try:
                    self.pending.remove(call)
                except ValueError:
                    continue
                call.completed = now
                call.waits = None
                call.group.done(call)
                self._done(call)

    def snapshot(self) -> tuple[dict, list]:
        """(groups, trace) as state.json holds them; nothing once the trace has stopped (a
        frozen trace would read as calls that never complete)."""
        if self.off:
            return {}, []
        with self.lock:
            groups = {name: group.entry() for name, group in self.groups.items()}
            trace = [call.trace_entry() for call in self.trace]
        return groups, trace

    def stop(self, error: BaseException) -> None:
        self.off = True
        fail(PART, error)


class _CudaMark:
    """A CUDA event recorded after a synchronous call on CUDA tensors returned."""

    __slots__ = ("event",)

    def __init__(self, event: Any) -> None:
        self.event = event

    def is_completed(self) -> bool:
        return bool(self.event.query())


def _is_done(wait: Any) -> bool:
    try:
        return bool(wait.is_completed())
    except Exception:
        return True  # a Work that cannot say (torch's _IllegalWork): nothing to wait for


def wrap(tracer: Tracer, op: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` traced as `op`; the wrapper's code carries the op's name (tracebacks, py-spy)."""
    try:
        import inspect

        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        params = []
    group_at = params.index("group") if "group" in params else None
    async_at = params.index("async_op") if "async_op" in params else None
    local = tracer.local
    getframe = sys._getframe

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if tracer.off or local.inside:
            return fn(*args, **kwargs)
        try:
            begun = tracer.enqueue(op, args, kwargs, group_at, async_at, getframe(1))
        except Exception as error:
            tracer.stop(error)
            begun = None
        if begun is None:
            return fn(*args, **kwargs)
        local.inside = True
        try:
            result = fn(*args, **kwargs)
        except BaseException as error:
            local.inside = False
            try:
                tracer.raised(begun[0], error)
            except Exception as failure:
                tracer.stop(failure)
            raise
        local.inside = False
        try:
            tracer.returned(begun[0], begun[1], result)
        except Exception as failure:
            tracer.stop(failure)
        return result

    try:
        # co_qualname is Python 3.11's (typeshed knows it only there); 3.10 refuses it here.
        wrapper.__code__ = wrapper.__code__.replace(co_name=op, co_qualname=op)  # type: ignore[call-arg]
    except (AttributeError, TypeError, ValueError):
        pass
    functools.update_wrapper(wrapper, fn)
    wrapper.__dict__["_mldebug_traced"] = fn  # how a second wrap finds the first
    return wrapper


def install(c10d: Any, tracer: Tracer) -> list[str]:
    """Wrap the collectives of `c10d` (torch.distributed.distributed_c10d) and the
    `torch.distributed` names that alias them; returns the names wrapped."""
    torch = sys.modules.get("torch")
    tracer.bind(c10d, torch)
    package = sys.modules.get("torch.distributed")
    wrapped = []
    for op in tracer.calls:
        fn = getattr(c10d, op, None)
        if not callable(fn) or getattr(fn, "_mldebug_traced", None) is not None:
            continue
        if getattr(fn, "__deprecated__", None) is not None:
            continue  # its warning must keep naming the program's line
        traced = wrap(tracer, op, fn)
        setattr(c10d, op, traced)
        if package is not None and getattr(package, op, None) is fn:
            setattr(package, op, traced)
        wrapped.append(op)
    return wrapped
