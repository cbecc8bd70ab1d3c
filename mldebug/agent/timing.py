"""Where the rank's time goes: the `timing` section of ranks/<rank>/state.json (docs/agent.md).

For the straggler, input-bound, comm-bound and host-sync findings (mldebug/analysis/timing.py)
the agent keeps, in bounded rolling windows:

  * `calls`: each completed collective's group, sequence number, op, entry time and completion
    time (the trace's own `enqueued` / `completed`, async work as the heartbeat polls it);
  * `steps`: per step its wall time split into time inside synchronous collectives, waiting
    in a DataLoader iterator's `__next__` (and the run-queue delay inside that wait,
    agent/runqueue.py), blocked at a host sync (`Tensor.item`, `.cpu`,
    `.tolist`, `torch.cuda.synchronize`: on CUDA tensors only, the others do not wait for a
    device), and the rest (compute); and the run-queue delay of the whole step (the training
    thread's, and its collectives' threads' while it waited in them): a busier node;
  * `loaders`: the DataLoaders waited on (dataset class, num_workers, the user's line);
  * `syncs`: the host-sync call sites and the seconds blocked there;
  * `work`: the user lines the main thread was on outside collectives and data loading, as
    the heartbeat saw them (about once a second): where a straggler spends its extra time;
  * `history`: the whole run's step time (or, where no step is counted, the collectives'
    cadence) in blocks of medians, bounded (agent/step_history.py);
  * `blocks`: the whole run's steps, a row of medians per 8 steps (agent/timing_blocks.py),
    for verdicts that hold over the run;
  * `flight`: the collectives the trace does not see (DDP's C++ all-reduces), from torch's
    Flight Recorder, read at a bounded rate (agent/timing_flight.py).

Cost per step: a perf_counter pair and an addition per collective, DataLoader batch and
host sync (a wrapper each); the heartbeat copies the windows and encodes them. Each rank's
own waits are measured on its own clock: no clock agreement across nodes is needed.

Stdlib only; torch is reached only through the modules the program imported.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import deque

from .collectives import user_site
from .eventlog import fail, fault_point
from .runqueue import SCAN_EVERY, RunDelay
from .step_history import StepHistory
from .timing_blocks import Blocks
from .timing_flight import FlightCalls

TYPE_CHECKING = False  # typing is not imported in ranks; mypy reads this block
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from types import FrameType, ModuleType
    from typing import Any

    from .collectives import Call, Tracer

PART = "timing"
ENV_TIMING = "MLDEBUG_TIMING"  # "0" or "off": no timing section, no timing hooks
VERSION = 1
MAX_CALLS = 256
MAX_STEPS = 64
MAX_STARTS = 1024  # step starts kept to place Flight Recorder entries in their step
MAX_SITES = 16  # distinct call sites kept per table
MAX_STACK = 64  # frames looked through for the main thread's wait
SYNC_METHODS = ("item", "cpu", "tolist")


def enabled(env: Mapping[str, str]) -> bool:
    return str(env.get(ENV_TIMING, "1")).strip().lower() not in ("0", "off", "no", "false")


class _Sites:
    """A bounded table of call site -> [count, seconds]; new sites past the cap are dropped."""

    def __init__(self) -> None:
        self.table: dict[str, list] = {}

    def add(self, site: str | None, seconds: float = 0.0) -> None:
        if site is None:
            return
        entry = self.table.get(site)
        if entry is None:
            if len(self.table) >= MAX_SITES:
                return
            entry = self.table[site] = [0, 0.0]
        entry[0] += 1
        entry[1] += seconds

    def rows(self) -> list:
        ordered = sorted(self.table.items(), key=lambda kv: (-kv[1][1], -kv[1][0]))
        return [[site, count, round(seconds, 6)] for site, (count, seconds) in ordered]


class Timing:
    def __init__(
        self,
        tracer: Tracer | None = None,
        rules: ModuleType | None = None,
        clock: Callable[[], float] = time.time,
        delay: RunDelay | None = None,
    ) -> None:
        self.off = False
        # The training thread's run-queue delay (agent/runqueue.py), read around each batch
        # waited for: the share of the data wait a busy node added.
        self.delay = delay if delay is not None else RunDelay()
        self.tracer = tracer
        self.is_library = rules.is_library_path if rules is not None else (lambda path: False)
        self._clock = clock
        self._lock = threading.Lock()
        self.calls: deque[list] = deque(maxlen=MAX_CALLS)
        self.steps: deque[list] = deque(maxlen=MAX_STEPS)
        self.loaders: dict[tuple, dict] = {}  # (id(dataset), num_workers) -> what it is
        self.syncs = _Sites()
        self.work = _Sites()
        self.flight = FlightCalls()
        self.history = StepHistory()  # the whole run's step time, in blocks
        self._calls = 0
        self.blocks = Blocks()  # the whole run, a row of medians per 8 steps
        self._starts: deque[tuple[float, int]] = deque(maxlen=MAX_STARTS)
        self._files: dict[str, bool] = {}
        self._main = threading.main_thread().ident
        # The step under way: when it began, and its seconds in collectives, data, syncs.
        self._begun: float | None = None
        self._collective = 0.0
        self._data = 0.0
        self._sync = 0.0
        self._data_delay: float | None = None  # of the data wait; None: not known
        self._next_scan = 0.0
        self._delay_mark: float | None = None  # the thread's run-queue delay at the step's start
        self._main_mark: float | None = None  # the same, where the main thread counts steps

    # ------------------------------------------------------------------ from the trace
    def collective_done(self, call: Call) -> None:
        """The tracer completed `call` (its lock held: no I/O, no waiting here)."""
        if self.off or call.enqueued is None or call.completed is None:
            return
        self.calls.append(
            [call.group.name, call.seq, call.op, call.enqueued, call.completed, call.asynchronous]
        )
        waited = 0.0 if call.asynchronous else max(0.0, call.completed - call.enqueued)
        self._collective += waited
        if self._begun is None:  # no step counted (yet): the collectives' cadence
            self._calls += 1
            self.history.add_call(self._calls, call.enqueued, waited, self._data, self._sync)

    # ------------------------------------------------------------------ from the step count
    def on_step(self, value: int, now: float) -> None:
        if self.off:
            return
        try:
            fault_point(PART)
            mark, self._delay_mark = self._delay_mark, self.delay.seconds()
            on_main = threading.get_ident() == self._main
            self._main_mark = self._delay_mark if on_main else None
            helpers = self.delay.helpers_delay()
            with self._lock:
                begun, self._begun = self._begun, now
                self._starts.append((now, value + 1))  # the step under way from now on
                coll, data, sync = self._collective, self._data, self._sync
                self._collective = self._data = self._sync = 0.0
                delay, self._data_delay = self._data_delay, None
            if begun is None:
                return  # the first step's start is not known: warm-up, left out
            wall = max(0.0, now - begun)
            row: list[float | None] = [value, begun, wall, coll, data, sync]
            if delay is not None:
                delay = min(delay, data)
            # The whole step's run-queue delay: the thread's own, and its collectives'
            # threads' up to the time it waited in them (they held it only that long).
            step_delay = None
            if mark is not None and self._delay_mark is not None:
                own = max(0.0, self._delay_mark - mark)
                step_delay = round(min(wall, own + min(coll, helpers)), 6)
            if delay is not None or step_delay is not None:
                row.append(round(delay, 6) if delay is not None else None)
            if step_delay is not None:
                row.append(step_delay)
            self.steps.append(row)
            self.history.add_step(value, begun, wall, coll, data, sync, step_delay)
            with self._lock:
                self.blocks.add(value, begun, wall, coll, data, sync, delay)
        except Exception as error:
            self.stop(error)

    # ------------------------------------------------------------------ DataLoader, syncs
    def data_waited(
        self, loader_iter: Any, seconds: float, frame: FrameType | None, delay: float | None = None
    ) -> None:
        """`delay`: the run-queue delay inside the wait, where the kernel counts it."""
        self._data += seconds
        if delay is not None:
            self._data_delay = (self._data_delay or 0.0) + max(0.0, delay)
        # One entry per loader (its dataset and workers), not per epoch's iterator.
        dataset = getattr(loader_iter, "_dataset", None)
        key = (id(dataset), getattr(loader_iter, "_num_workers", None))
        entry = self.loaders.get(key)
        if entry is None:
            if len(self.loaders) >= MAX_SITES:
                return
            entry = self.loaders[key] = {
                "dataset": type(dataset).__name__ if dataset is not None else None,
                "num_workers": getattr(loader_iter, "_num_workers", None),
                "site": self.site(frame),
                "batches": 0,
                "wait": 0.0,
            }
        entry["batches"] += 1
        entry["wait"] += seconds

    def sync_waited(self, seconds: float, frame: FrameType | None) -> None:
        self._sync += seconds
        self.syncs.add(self.site(frame), seconds)

    def site(self, frame: FrameType | None) -> str | None:
        """file:line of the innermost frame of the user's own code, from `frame` out (this
        file's wrappers passed over)."""
        return user_site(frame, self._files, self.is_library, skip=__file__)

    # ------------------------------------------------------------------ the heartbeat's side
    def sample_main(self) -> None:
        """Where the main thread works right now, when not in a collective or a batch."""
        if self.off or self._begun is None or self._main is None:
            return  # before the first step: imports and set-up, not the training's work
        frame = sys._current_frames().get(self._main)
        inner = frame
        for _ in range(MAX_STACK):
            if inner is None:
                break
            name = inner.f_code.co_filename
            if name.endswith(("agent/collectives.py", "torch/utils/data/dataloader.py")):
                return  # waiting, not working
            inner = inner.f_back
        self.work.add(self.site(frame))

    def main_step_delay(self) -> float | None:
        """The main thread's run-queue delay when its step under way began (None: not known,
        or steps are counted on another thread): `dump` subtracts it from the delay it reads
        then, the CPU the busy node withheld from this step so far."""
        return None if self.off else self._main_mark

    def _starts_copy(self) -> list[tuple[float, int]]:
        with self._lock:
            return list(self._starts)

    def section(self) -> dict:
        if self.tracer is not None and not sys.is_finalizing():
            try:
                traced = {name: group.seq for name, group in list(self.tracer.groups.items())}
            except RuntimeError:  # a group added meanwhile: the next heartbeat reads
                traced = None
            if traced is not None:
                self.flight.maybe_read(traced, self._starts_copy)
        with self._lock:
            calls, steps = list(self.calls), list(self.steps)
            blocks = list(self.blocks.rows)
        section = {
            "version": VERSION,
            "calls": calls,
            "steps": steps,
            "loaders": [dict(entry) for entry in list(self.loaders.values())],
            "syncs": self.syncs.rows(),
            "work": self.work.rows(),
            "blocks": blocks,
        }
        if self.flight.rows:
            section["flight"] = self.flight.rows
        if self._clock() >= self._next_scan:  # the collectives' threads, now and then
            self._next_scan = self._clock() + SCAN_EVERY
            self.delay.scan_helpers()
        history = self.history.rows()
        if history is not None:
            section["history"] = history
        return section

    def stop(self, error: BaseException) -> None:
        self.off = True
        fail(PART, error)


def _timed_next(timing: Timing, original: Callable[[Any], Any]) -> Callable[[Any], Any]:
    perf = time.perf_counter
    getframe = sys._getframe

    delay = timing.delay.seconds

    def __next__(self: Any) -> Any:
        if timing.off:
            return original(self)
        before = delay()
        started = perf()
        try:
            return original(self)
        finally:
            try:
                seconds = perf() - started
                after = delay() if before is not None else None
                held = after - before if after is not None and before is not None else None
                timing.data_waited(self, seconds, getframe(1), held)
            except Exception as error:
                timing.stop(error)

    __next__._mldebug_timed = original  # type: ignore[attr-defined]
    return __next__


def install_dataloader(dataloader_module: Any, timing: Timing) -> None:
    """Post-import hook of torch.utils.data.dataloader: time each batch's `__next__`."""
    base = dataloader_module._BaseDataLoaderIter
    original = base.__next__
    if getattr(original, "_mldebug_timed", None) is None:
        base.__next__ = _timed_next(timing, original)


def _timed_sync(
    timing: Timing, original: Callable[..., Any], cuda_only: bool
) -> Callable[..., Any]:
    perf = time.perf_counter
    getframe = sys._getframe

    def timed(*args: Any, **kwargs: Any) -> Any:
        if timing.off or (cuda_only and not getattr(args[0], "is_cuda", False)):
            return original(*args, **kwargs)
        started = perf()
        try:
            return original(*args, **kwargs)
        finally:
            try:
                timing.sync_waited(perf() - started, getframe(1))
            except Exception as error:
                timing.stop(error)

    timed._mldebug_timed = original  # type: ignore[attr-defined]
    try:
        timed.__name__ = original.__name__
    except (AttributeError, TypeError):
        pass
    return timed


def install_syncs(torch_module: Any, timing: Timing) -> None:
    """Time the host syncs the program makes on CUDA tensors, and torch.cuda.synchronize."""
    tensor = torch_module.Tensor
    for name in SYNC_METHODS:
        original = getattr(tensor, name, None)
        if original is not None and getattr(original, "_mldebug_timed", None) is None:
            setattr(tensor, name, _timed_sync(timing, original, cuda_only=True))


def install_cuda_sync(cuda_module: Any, timing: Timing) -> None:
    original = getattr(cuda_module, "synchronize", None)
    if original is not None and getattr(original, "_mldebug_timed", None) is None:
        cuda_module.synchronize = _timed_sync(timing, original, cuda_only=False)
