"""The collectives the Python trace cannot see (DDP's C++ gradient all-reduces), from torch's
own Flight Recorder, for the `timing` section's `flight` rows (docs/agent.md).

torch 2.13 records every collective of its process groups (gloo included) in a ring of
TORCH_FR_BUFFER_SIZE entries (2,000 by default), each with `time_created_ns` (when the rank
enqueued it) and, where timing is on (NCCL with TORCH_NCCL_ENABLE_TIMING), `duration_ms`.
Reading it costs a dump of the whole ring (about 30 ms of torch's pickle and 10 ms to load
it for 2,000 entries on a loaded 2-core machine, GIL held), so it is read:

  * at most once every READ_EVERY seconds, at the first heartbeat after a multiple of it on
    the wall clock, so that every rank reads at about the same moment and their newest
    entries overlap;
  * only while it holds collectives the trace does not see: while the trace counts every
    group as far as the ring does, it is only looked at every PROBE_EVERY seconds (a DDP
    model made later is still found);
  * never more than COST_SHARE of the time: a slower read stretches the gap.

Each read keeps the newest MAX_CALLS collectives (point-to-point ops aside): group, number,
op, created (epoch seconds, the host's clock), duration in seconds or None, and the step
it was enqueued in by the rank's own step count (None before the first step's start), so
that the ranks' rows are compared step by step long after the steps window moved on.

Stdlib only; torch is looked up in sys.modules, never imported here. A failure is said
once and the part stands aside (the rest of the timing goes on).
"""

from __future__ import annotations

import bisect
import io
import pickle
import time
from collections.abc import Callable, Sequence

from .eventlog import fail, fault_point
from .flight import _pickle_dumper, group_name

TYPE_CHECKING = False  # typing is not imported in ranks; mypy reads this block
if TYPE_CHECKING:
    from typing import NoReturn

PART = "timing_flight"
READ_EVERY = 10.0  # seconds between two reads, at least
PROBE_EVERY = 60.0  # ...while the trace sees every collective the ring holds
COST_SHARE = 0.002  # of wall time spent reading, at most
MAX_CALLS = 256
MAX_DUMP = 16 << 20  # bytes loaded at most
MAX_TEXT = 64


class _PlainOnly(pickle.Unpickler):
    """torch's dump is dicts, lists, strings and numbers: nothing else is loaded."""

    def find_class(self, module: str, name: str) -> NoReturn:
        raise pickle.UnpicklingError(f"{module}.{name} is not a plain value")


def _dumper() -> Callable[[], object] | None:
    """A function returning the ring's entries as plain data, or None while
    torch.distributed is not imported or not initialised (agent/flight.py finds the dump)."""
    dump = _pickle_dumper()
    if dump is None:
        return None

    def read() -> object:
        raw = dump(includeCollectives=True, includeStackTraces=False, onlyActive=False)
        if not isinstance(raw, list):
            return _load(raw)
        entries: list = []  # torch 2.15, one ring per backend (agent/flight.py): all of them
        for _, ring in raw:
            data = _load(ring)
            found = data.get("entries") if isinstance(data, dict) else None
            entries.extend(e for e in (found if isinstance(found, list) else []) if _created(e))
        entries.sort(key=_created)  # oldest first, as one ring is
        return {"entries": entries}

    return read


def _created(entry: object) -> float:
    when = _number(entry.get("time_created_ns")) if isinstance(entry, dict) else None
    return when or 0.0


def _load(raw: bytes) -> object:
    if len(raw) > MAX_DUMP:
        raise ValueError(f"its dump is {len(raw):,} bytes, over {MAX_DUMP:,}")
    return _PlainOnly(io.BytesIO(raw)).load()


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def rows_of(data: object, starts: Sequence[tuple[float, int]] = ()) -> list[list]:
    """[group, seq, op, created, duration, step] of each collective in a dump, oldest first;
    `starts`: (start time, step number) of the rank's steps, oldest first."""
    times = [start for start, _ in starts]
    entries = data.get("entries") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        return []
    rows = []
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("is_p2p") is True:
            continue
        group = group_name(entry.get("process_group"))
        seq = entry.get("collective_seq_id")
        created = _number(entry.get("time_created_ns"))
        if group is None or not isinstance(seq, int) or isinstance(seq, bool) or not created:
            continue
        op = str(entry.get("profiling_name") or "")
        op = (op.split(":", 1)[1] if ":" in op else op)[:MAX_TEXT] or "?"
        duration = _number(entry.get("duration_ms"))
        when = created / 1e9
        index = bisect.bisect_right(times, when) - 1
        step = starts[index][1] if index >= 0 else None
        rows.append([group, seq, op, when, duration / 1000 if duration else None, step])
    return rows[-MAX_CALLS:]


class FlightCalls:
    def __init__(
        self,
        dumper: Callable[[], Callable[[], object] | None] = _dumper,
        clock: Callable[[], float] = time.time,
        perf: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.off = False
        self.rows: list[list] = []
        self.reads = 0
        self.cost = 0.0  # seconds the last read took
        self._dumper = dumper
        self._clock = clock
        self._perf = perf
        self._next = 0.0  # the wall-clock time of the next read, a multiple of its gap

    def maybe_read(
        self, traced: dict[str, int], starts: Callable[[], list[tuple[float, int]]]
    ) -> None:
        """From the heartbeat: read the ring when its time has come. `traced`: the trace's
        count of calls per group (its seq); `starts()`: (start, step) of the rank's steps."""
        if self.off:
            return
        try:
            now = self._clock()
            if now < self._next:
                return
            read = self._dumper()
            if read is None:
                return
            fault_point(PART)
            started = self._perf()
            rows = rows_of(read(), starts())
            self.cost = self._perf() - started
            self.reads += 1
            newest: dict[str, int] = {}
            for group, seq, *_ in rows:
                newest[group] = max(newest.get(group, 0), seq)
            # The trace sees them all: no reason to pay often (an empty ring says nothing yet).
            seen = bool(newest) and all(traced.get(g, 0) >= seq for g, seq in newest.items())
            gap = max(PROBE_EVERY if seen else READ_EVERY, self.cost / COST_SHARE)
            self._next = (now // gap + 1) * gap
            self.rows = [] if seen else rows
        except Exception as error:
            self.off = True
            self.rows = []
            fail(PART, error)
