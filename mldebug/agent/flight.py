"""torch's own Flight Recorder, read as a cross-check while the rank looks stuck (docs/agent.md).

torch 2.13 records every collective its process groups issue (gloo included) in a ring
buffer, DDP's gradient all-reduces among them, which the agent's Python trace never sees.
torch 2.15 keeps one ring per backend: `_dump_fr_trace_json(backend=...)` dumps one ("gloo"
by default), and the "nccl" backend is ProcessGroupNCCL2 unless TORCH_DIST_USE_NCCL2=0,
which records through a FlightRecorderHook into its own ring. There, every ring the job's
process groups may record into is read (`rings()`: gloo, nccl, nccl2, nccl-legacy as their
backends say), and each group's summary says which ring it came from (`ring`).
The heartbeat thread asks `Flight.summary()` each round; only while torch.distributed is
initialised and the rank looks stuck (a traced call pending for more than PENDING_INTERVALS
heartbeats, or the step still for more than STILL_INTERVALS) does it call torch's JSON dump,
at most once every MIN_GAP seconds, and keep per group the last entry and how many entries
are not retired. A rank whose steps move never pays for a dump. A failure is said once
(an agent_error event) and the part stands aside.

`FlightDumps` writes torch's own pickle dump into <run>/fr/ when asked (`mldebug run
--flight-recorder`: the hang watchdog, or a user, writes <run>/fr/request).

Stdlib only; torch is looked up in sys.modules, never imported here.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import time

from .eventlog import fail, fault_point
from .siblings import sibling as _sibling

TYPE_CHECKING = False  # typing is not imported in ranks; mypy reads this block
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable
    from typing import Any

PART = "flight_recorder"
PENDING_INTERVALS = 2
STILL_INTERVALS = 5
MIN_GAP = 5.0  # seconds between two dumps
MAX_DUMP = 16 << 20  # bytes of JSON parsed at most
MAX_ENTRIES = 4096
MAX_GROUPS = 64
MAX_TEXT = 200


_rules = _sibling("ledger.rules")  # the collective ledger's contract: group names
DEFAULT_GROUP = _rules.DEFAULT_GROUP


def _c10d() -> Any:
    """torch's c10d bindings once torch.distributed is imported and initialised, else None
    (the agent never imports torch itself)."""
    dist = sys.modules.get("torch.distributed")
    c10d = sys.modules.get("torch._C._distributed_c10d")
    if dist is None or c10d is None:
        return None
    initialised = getattr(dist, "is_initialized", None)
    if initialised is None or not initialised():
        return None
    return c10d


# The rings a backend's collectives may be in, on a torch whose dumps take `backend=`:
# "nccl" is ProcessGroupNCCL2 (its hook's ring) or, with TORCH_DIST_USE_NCCL2=0, the stock
# ProcessGroupNCCL; the names torch does not know dump an empty ring.
RINGS_OF = {"nccl": ("nccl", "nccl2", "nccl-legacy"), "nccl2": ("nccl2",)}
MAX_RINGS = 8


def takes_backend(dump: Callable[..., Any]) -> bool:
    """Does this dump function take `backend=` (torch 2.15: one ring per backend)? Its
    pybind signature is the first line of its docstring."""
    doc = getattr(dump, "__doc__", None)
    return isinstance(doc, str) and "backend" in doc.split("\n", 1)[0]


def rings() -> tuple[str, ...]:
    """The rings to read: those of the backends the job's process groups use (torch's own
    `pg_backend_config`, "cpu:gloo,cuda:nccl"), gloo first."""
    c10d = sys.modules.get("torch.distributed.distributed_c10d")
    configs = getattr(getattr(c10d, "_world", None), "pg_backend_config", None)
    found = ["gloo"]
    values = list(configs.values())[:MAX_GROUPS] if isinstance(configs, dict) else []
    for value in values:
        for part in str(value)[:MAX_TEXT].split(","):
            backend = part.rsplit(":", 1)[-1].strip().lower()
            for ring in RINGS_OF.get(backend, (backend,)):
                if ring and ring not in found and len(found) < MAX_RINGS:
                    found.append(ring)
    return tuple(found)


class RingDumps:
    """torch 2.15's dumps, one per ring: called like the dump, answers [(ring, raw)]."""

    def __init__(self, dump: Callable[..., Any], names: Iterable[str]) -> None:
        self.dump = dump
        self.names = tuple(names)

    def __call__(self, **kwargs: Any) -> list:
        return [(name, self.dump(backend=name, **kwargs)) for name in self.names]


def _dumper() -> Callable[..., Any] | None:
    """torch's JSON dump of its Flight Recorder, or None when torch.distributed is not
    imported or not initialised (or this torch has none). On a torch with one ring per
    backend, a RingDumps over the rings the job uses."""
    c10d = _c10d()
    if c10d is None:
        return None
    dump = getattr(c10d, "_dump_fr_trace_json", None)
    if dump is not None and takes_backend(dump):
        return RingDumps(dump, rings())
    return dump or getattr(c10d, "_dump_nccl_trace_json", None)


def merge_rings(summaries: list) -> dict:
    """One summary from each ring's [(ring, summary)]: per group, the ring whose last entry
    is the newest (a group of two backends has entries in both)."""
    merged: dict[str, dict] = {}
    for ring, summary in summaries:
        for name, group in summary.items():
            group = {**group, "ring": ring}
            known = merged.get(name)
            if known is None or (group["last"].get("created") or 0) > (
                known["last"].get("created") or 0
            ):
                merged[name] = group
    return merged


def group_name(process_group: object) -> str | None:
    """The agent's name of an entry's group: default_pg for the world, torch's name when it
    counted it out ("1"), else its description or name."""
    if not isinstance(process_group, (list, tuple)) or len(process_group) != 2:
        return None
    name, desc = (str(part)[:MAX_TEXT] for part in process_group)
    return _rules.group_of_entry(name, desc) or None


def _ints(value: object) -> list:
    if not isinstance(value, list):
        return []
    return [int(v) for v in value[:8] if isinstance(v, int) and not isinstance(v, bool)]


def summarise(data: object) -> dict:
    """{group: {"last": {...}, "pending": n}} from a parsed dump (the contract's field)."""
    entries = data.get("entries") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        return {}
    groups: dict[str, dict] = {}
    for entry in entries[-MAX_ENTRIES:]:
        if not isinstance(entry, dict):
            continue
        name = group_name(entry.get("process_group"))
        seq = entry.get("collective_seq_id")
        if name is None or not isinstance(seq, int) or isinstance(seq, bool):
            continue
        if name not in groups and len(groups) >= MAX_GROUPS:
            continue
        group = groups.setdefault(name, {"last": None, "pending": 0})
        retired = entry.get("retired") is True
        if not retired:
            group["pending"] += 1
        last = group["last"]
        if last is not None and last["seq"] > seq:
            continue
        op = str(entry.get("profiling_name") or "")
        op = op.split(":", 1)[1] if ":" in op else op
        created = entry.get("time_created_ns")
        sizes = entry.get("input_sizes")
        dtypes = entry.get("input_dtypes")
        group["last"] = {
            "seq": seq,
            "op": op[:MAX_TEXT] or "?",
            "sizes": [_ints(s) for s in sizes[:16]] if isinstance(sizes, list) else [],
            "dtypes": [str(d)[:MAX_TEXT] for d in dtypes[:16]] if isinstance(dtypes, list) else [],
            "retired": retired,
            "created": created / 1e9 if isinstance(created, int) and created > 0 else None,
        }
    return {name: g for name, g in groups.items() if g["last"] is not None}


class Flight:
    """What the heartbeat puts under "flight_recorder"; `dumper()` finds torch's dump."""

    def __init__(
        self,
        interval: float,
        started: float,
        dumper: Callable[[], Callable[..., Any] | None] = _dumper,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.interval = interval
        self.started = started
        self._dumper = dumper
        self._clock = clock
        self.off = False
        self.dumps = 0
        self._last_dump: float | None = None
        self._summary: dict | None = None
        self._summary_of: tuple | None = None  # the trace's progress when it was read

    def stuck(self, groups: dict, step_time: float | None, now: float) -> bool:
        """A traced call pending for more than 2 heartbeats, or the step still for 5."""
        for entry in groups.values():
            made, done = entry.get("enqueued"), entry.get("completed")
            if not made:
                continue
            if done and done.get("seq", 0) >= made.get("seq", 0):
                continue
            when = made.get("time")
            if when is not None and now - when > PENDING_INTERVALS * self.interval:
                return True
        since = step_time if step_time is not None else self.started
        return now - since > STILL_INTERVALS * self.interval

    def summary(self, groups: dict, step_time: float | None) -> dict | None:
        """The last summary while the rank looks stuck and its trace has not moved since
        (a fresh dump when MIN_GAP passed); None while it moves, and once the part stood
        aside. Each group's summary says when it was `read`."""
        if self.off:
            return None
        try:
            now = self._clock()
            if not self.stuck(groups, step_time, now):
                self._summary = None
                return None
            progress = _progress(groups, step_time)
            if self._summary_of != progress:
                # A call completed (or a step ended) since the dump: what it showed pending
                # may be done. Not written again until the next dump.
                self._summary = None
            if self._last_dump is not None and now - self._last_dump < MIN_GAP:
                return self._summary
            dump = self._dumper()
            if dump is None:
                return None
            self._last_dump = now
            fault_point(PART)
            raw = dump(includeCollectives=True, onlyActive=False)
            self.dumps += 1
            read = raw if isinstance(raw, list) else [(None, raw)]  # RingDumps: per ring
            if sum(len(ring_raw) for _, ring_raw in read) > MAX_DUMP:
                raise ValueError(f"its dump is over {MAX_DUMP:,} bytes")
            summaries = [(ring, summarise(json.loads(ring_raw))) for ring, ring_raw in read]
            self._summary = summaries[0][1] if raw is not read else merge_rings(summaries)
            for group in self._summary.values():
                group["read"] = now
            self._summary_of = progress
            return self._summary
        except Exception as error:
            self.off = True
            self._summary = None
            fail(PART, error)
            return None


def _progress(groups: dict, step_time: float | None) -> tuple:
    """What moves when the rank makes progress: each group's last completed call, the step."""
    done = []
    for name, entry in groups.items():
        completed = entry.get("completed") if isinstance(entry, dict) else None
        done.append((name, completed.get("seq") if isinstance(completed, dict) else None))
    return (tuple(sorted(done, key=str)), step_time)


# ---- dumps on request: `mldebug run --flight-recorder` (docs/flight-recorder.md) ----------

ENV_FR_DIR = "MLDEBUG_FR_DIR"  # <run>/fr: set by `mldebug run --flight-recorder`
REQUEST_FILE = "request"  # a new one (or a touch) asks every rank for a dump
DUMP_PREFIX = "rank_"  # the dump is <dir>/rank_<rank>, as torch names its own there
DUMPS_PART = "flight_recorder_dumps"
MAX_WRITE = 256 << 20  # bytes of one dump written at most


def _pickle_dumper() -> Callable[..., Any] | None:
    """torch's pickle dump of its Flight Recorder (with stacks), or None when
    torch.distributed is not imported or not initialised; a RingDumps on a torch with one
    ring per backend."""
    c10d = _c10d()
    if c10d is None:
        return None
    dump = getattr(c10d, "_dump_fr_trace", None)
    if dump is not None and takes_backend(dump):
        return RingDumps(dump, rings())
    return dump or getattr(c10d, "_dump_nccl_trace", None)


class FlightDumps:
    """Writes torch's Flight Recorder dump to <folder>/rank_<rank> each time
    <folder>/request is new or touched. The heartbeat thread calls `check()` each round:
    one lstat while nothing is asked. A request seen before torch.distributed is initialised
    waits for it. A failure is said once and the part stands aside."""

    def __init__(
        self,
        folder: str | None,
        rank: int,
        dumper: Callable[[], Callable[..., Any] | None] = _pickle_dumper,
    ) -> None:
        self.folder = folder or ""  # "": no folder, and the part is off
        self.rank = rank
        self._dumper = dumper
        self._served: tuple | None = None
        self.off = not folder
        self.written = 0

    def _request(self) -> tuple | None:
        """What identifies the request file now (inode, mtime, size); None without one."""
        try:
            info = os.lstat(os.path.join(self.folder, REQUEST_FILE))
        except OSError:
            return None
        if not stat.S_ISREG(info.st_mode):
            return None
        return (info.st_ino, info.st_mtime_ns, info.st_size)

    def check(self) -> bool:
        """A dump written now, for a request not served yet."""
        if self.off:
            return False
        try:
            token = self._request()
            if token is None or token == self._served:
                return False
            dump = self._dumper()
            if dump is None:
                return False
            fault_point(DUMPS_PART)
            data = dump(includeCollectives=True, includeStackTraces=True, onlyActive=False)
            if isinstance(data, list):  # RingDumps: the ring that holds the most
                data = max((raw for _, raw in data), key=len, default=b"")
            self._served = token
            if len(data) > MAX_WRITE:
                raise ValueError(f"its dump is {len(data):,} bytes, over {MAX_WRITE:,}")
            self._write(bytes(data))
            self.written += 1
            return True
        except Exception as error:
            self.off = True
            fail(DUMPS_PART, error)
            return False

    def _write(self, data: bytes) -> None:
        """Write-then-rename: a reader never sees half a dump; nothing planted is followed."""
        final = os.path.join(self.folder, f"{DUMP_PREFIX}{self.rank}")
        temp = os.path.join(self.folder, f".{DUMP_PREFIX}{self.rank}.{os.getpid()}.tmp")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(temp, flags, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.close(fd)
            fd = -1
            os.replace(temp, final)
        except BaseException:
            if fd >= 0:
                os.close(fd)
            try:
                os.unlink(temp)
            except OSError:
                pass
            raise
