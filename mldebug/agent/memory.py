"""The rank's memory: RSS always, CUDA and NVML when the program uses a GPU, a history per
step, a `memory_growth` event, and what is left behind at a CUDA out-of-memory error.

  * RSS from /proc/self/statm.
  * CUDA from `torch.cuda.memory_stats()`, only once `torch.cuda.is_initialized()`: the
    agent never initialises CUDA itself (it would take GPU memory and change the program).
  * NVML through `pynvml` (nvidia-ml-py) when importable and CUDA is in use: this
    process's used memory on its device (null when the driver does not list this pid, as
    in a container with its own pid namespace) and the device's total. Read by the
    heartbeat only (an NVML call costs milliseconds).
  * `memory_history`: [step, time, rss, cuda allocated] when the step changes, at most
    one row per MIN_SAMPLE_INTERVAL (a fast loop would otherwise pay a read per step),
    the last 64 rows.
  * `memory_growth`: once, when the tracked figure (CUDA allocated when CUDA is in use,
    else RSS) grew by more than GROWTH_THRESHOLD between each of the last 8 rows,
    leaving out the first steps (optimizer state is created at the first one).
  * CUDA OOM: torch's OOM observer (`torch._C._cuda_attach_out_of_memory_observer`),
    attached when CUDA initialises (`torch.cuda._lazy_call`), runs before the error
    reaches the program: it writes memory_summary.txt and, if the program recorded its
    allocation history (`torch.cuda.memory._record_memory_history`), memory_snapshot.pickle
    into the rank's folder (the first OOM only: later ones are events), and an `oom` event.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from .census import Census
from .eventlog import emit, fail, fault_point
from .memory_timeline import Timeline
from .siblings import sibling

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import ModuleType

_human = sibling("rankrules").human_bytes  # sizes worded as the outside words them

PART = "memory"
HISTORY_LEN = 64
MIN_SAMPLE_INTERVAL = 0.1
GROWTH_WINDOW = 8
GROWTH_THRESHOLD = 64 << 10
SKIP_FIRST_STEPS = 2
MAX_DEVICES = 16
MAX_OOM_EVENTS = 16

CUDA_FIELDS = {
    "allocated": "allocated_bytes.all.current",
    "reserved": "reserved_bytes.all.current",
    "max_allocated": "allocated_bytes.all.peak",
    "max_reserved": "reserved_bytes.all.peak",
    "num_ooms": "num_ooms",
    "num_alloc_retries": "num_alloc_retries",
    "inactive_split": "inactive_split_bytes.all.current",
}

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def read_rss(path: str = "/proc/self/statm") -> int | None:
    try:
        with open(path, "rb") as handle:
            return int(handle.read(256).split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


def cuda_figures(stats: dict) -> dict:
    """state.json's `memory.cuda` from a `torch.cuda.memory_stats()` dict."""
    figures = {}
    for name, key in CUDA_FIELDS.items():
        value = stats.get(key)
        figures[name] = int(value) if isinstance(value, (int, float)) else 0
    return figures


class Memory:
    def __init__(
        self,
        rank_dir: str | None = None,
        safeio: ModuleType | None = None,
        torch_of: Callable[[], Any] = lambda: sys.modules.get("torch"),
        clock: Callable[[], float] = time.time,
        rss_of: Callable[[], int | None] = read_rss,
    ) -> None:
        self.rank_dir = rank_dir
        self.safeio = safeio
        self._torch_of = torch_of
        self._clock = clock
        self._rss_of = rss_of
        self.history: deque[list] = deque(maxlen=HISTORY_LEN)
        self.off = False
        self._last_sample: float | None = None
        self._growth_told = False
        # None: not tried; False: unavailable; else (the pynvml module, the device's handle)
        self._nvml: bool | tuple[Any, Any] | None = None
        self._oom_count = 0
        self.device: int | None = None  # the rank's GPU, once known
        self._oom_files: list[str] | None = None
        self._lock = threading.Lock()
        self.timeline = Timeline()  # hours of points, by time (agent/memory_timeline.py)
        run_root = os.path.dirname(os.path.dirname(rank_dir)) if rank_dir else None
        self.census = Census(run_root, torch_of)  # live tensors (agent/census.py)

    # ------------------------------------------------------------------ readings
    def _cuda(self) -> Any:
        """torch.cuda when the program has initialised CUDA, else None."""
        torch = self._torch_of()
        cuda = getattr(torch, "cuda", None)
        if cuda is None:
            return None
        try:
            return cuda if cuda.is_initialized() else None
        except Exception:
            return None

    def cuda_reading(self) -> dict | None:
        cuda = self._cuda()
        if cuda is None:
            return None
        return cuda_figures(self._device_stats(cuda))

    def _device_stats(self, cuda: Any) -> dict:
        """memory_stats() of the rank's GPU, named by index: the CUDA device is per thread,
        and the heartbeat thread's is device 0 whatever the program uses. The rank's GPU is
        the one with the most memory reserved (found again until one has some)."""
        if self.device is not None:
            return cuda.memory_stats(self.device)
        count = cuda.device_count() if hasattr(cuda, "device_count") else 0
        if count <= 1:
            return cuda.memory_stats(0) if count == 1 else cuda.memory_stats()
        best, best_stats = None, {}
        for index in range(min(count, MAX_DEVICES)):
            stats = cuda.memory_stats(index)
            if best is None or stats.get(CUDA_FIELDS["reserved"], 0) > best_stats.get(
                CUDA_FIELDS["reserved"], 0
            ):
                best, best_stats = index, stats
        if best_stats.get(CUDA_FIELDS["reserved"], 0) > 0:
            self.device = best
        return best_stats

    def nvml_reading(self) -> dict | None:
        cuda = self._cuda()
        if cuda is None or self._nvml is False:
            return None
        try:
            if self._nvml is None:
                self._nvml = self._open_nvml(cuda, self.device)
                if self._nvml is False:
                    return None
            if not isinstance(self._nvml, tuple):
                return None
            pynvml, handle = self._nvml
            total = int(pynvml.nvmlDeviceGetMemoryInfo(handle).total)
            used = None
            pid = os.getpid()
            for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                if proc.pid == pid and isinstance(proc.usedGpuMemory, int):
                    used = proc.usedGpuMemory
            return {"used": used, "total": total}
        except Exception:
            self._nvml = False  # NVML is optional: no reading, no error
            return None

    @staticmethod
    def _open_nvml(cuda: Any, device: int | None) -> bool | tuple[Any, Any]:
        import importlib.util

        if importlib.util.find_spec("pynvml") is None:
            return False
        import pynvml

        pynvml.nvmlInit()
        index = device if device is not None else cuda.current_device()
        uuid = getattr(cuda.get_device_properties(index), "uuid", None)
        if uuid is not None:
            text = str(uuid)
            handle = pynvml.nvmlDeviceGetHandleByUUID(
                text if text.startswith("GPU-") else f"GPU-{text}"
            )
        elif not os.environ.get("CUDA_VISIBLE_DEVICES"):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        else:
            return False
        return pynvml, handle

    def reading(self, nvml: bool = True) -> dict:
        """state.json's `memory`."""
        reading: dict[str, object] = {"rss": self._rss_of(), "cuda": None, "nvml": None}
        if self.off:
            return reading
        try:
            fault_point(PART)
            reading["cuda"] = self.cuda_reading()
            if nvml:
                reading["nvml"] = self.nvml_reading()
        except Exception as error:
            self._stop(error)
        return reading

    # ------------------------------------------------------------------ over time
    def tick(self, when: float, reading: dict, step: int | None, calls: int) -> dict:
        """The heartbeat's round (its own thread): a timeline point, the limits now and
        then, a census when one is due. state.json's sections that come of it."""
        sections: dict = {}
        if self.off:
            return sections
        try:
            fault_point(PART)
            cuda = reading.get("cuda") or {}
            nvml = reading.get("nvml") or {}
            allocated = cuda.get("allocated") if cuda else None
            self.timeline.add(when, reading.get("rss"), allocated, step, calls)
            self.timeline.read_limits(when, nvml.get("total") or self._gpu_total())
            sections["memory_timeline"] = self.timeline.section()
            value = allocated if allocated else reading.get("rss")
            self.census.maybe_take(when, value)
            census = self.census.section()
            if census is not None:
                sections["memory_census"] = census
        except Exception as error:
            self._stop(error)
        return sections

    def _gpu_total(self) -> int | None:
        cuda = self._cuda()
        if cuda is None:
            return None
        index = self.device if self.device is not None else 0
        return int(cuda.get_device_properties(index).total_memory)

    # ------------------------------------------------------------------ per step
    def on_step(self, step: int, when: float) -> None:
        """The step changed (the program's thread): a history row, the growth check."""
        if self.off:
            return
        last = self._last_sample
        if last is not None and when - last < MIN_SAMPLE_INTERVAL:
            return
        self._last_sample = when
        try:
            fault_point(PART)
            cuda = self.cuda_reading()
            allocated = cuda["allocated"] if cuda is not None else None
            with self._lock:
                self.history.append([step, when, self._rss_of(), allocated])
            self._check_growth()
        except Exception as error:
            self._stop(error)

    def _check_growth(self) -> None:
        if self._growth_told:
            return
        rows = [row for row in self.history if row[0] is not None and row[0] > SKIP_FIRST_STEPS]
        rows = rows[-(GROWTH_WINDOW + 1) :]
        if len(rows) <= GROWTH_WINDOW:
            return
        column, what = (3, "CUDA allocated") if rows[-1][3] is not None else (2, "RSS")
        values = [row[column] for row in rows]
        if any(v is None for v in values):
            return
        if not all(b - a > GROWTH_THRESHOLD for a, b in zip(values, values[1:], strict=False)):
            return
        steps = rows[-1][0] - rows[0][0]
        rate = (values[-1] - values[0]) / max(steps, 1)
        self._growth_told = True
        emit(
            "memory_growth",
            f"{what} grew at each of the last {GROWTH_WINDOW} steps: {_human(rate)} per step "
            f"(from {_human(values[0])} at step {rows[0][0]} to {_human(values[-1])} at step "
            f"{rows[-1][0]})",
            what="cuda" if column == 3 else "rss",
            rate=rate,
            first_step=rows[0][0],
            first=values[0],
            last=values[-1],
        )

    def history_rows(self) -> list[list]:
        with self._lock:
            return [list(row) for row in self.history]

    def _stop(self, error: BaseException) -> None:
        self.off = True
        fail(PART, error)

    # ------------------------------------------------------------------ OOM
    def watch_oom(self, cuda_module: Any) -> None:
        """Post-import hook of torch.cuda: attach the OOM observer when CUDA initialises."""
        torch = self._torch_of()
        attach = getattr(getattr(torch, "_C", None), "_cuda_attach_out_of_memory_observer", None)
        lazy_call = getattr(cuda_module, "_lazy_call", None)
        if attach is None or lazy_call is None:
            return  # a build without CUDA

        def attach_observer() -> None:
            try:  # a queued call that raises would break the program's CUDA init
                attach(self.on_oom)
            except Exception as error:
                fail(PART, error)

        lazy_call(attach_observer)

    def on_oom(self, device: int, alloc: int, device_allocated: int, device_free: int) -> None:
        """torch's OOM observer: runs before the OutOfMemoryError reaches the program."""
        try:
            if self.device is None and isinstance(device, int):
                self.device = device
            fault_point(PART)
            self._oom_count += 1
            if self._oom_count > MAX_OOM_EVENTS:
                return
            first = self._oom_files is None
            if first:
                self._oom_files = self._write_oom_files(device)
            files = self._oom_files or []
            where = ", ".join(files) or "no files"
            emit(
                "oom",
                f"CUDA out of memory on device {device} allocating {_human(alloc)} "
                f"({_human(device_free)} free): "
                + (f"{where} written" if first else f"{where} of the first one kept"),
                device=device,
                requested=alloc,
                device_allocated=device_allocated,
                device_free=device_free,
                files=self._oom_files,
            )
        except Exception as error:
            self._oom_count = MAX_OOM_EVENTS  # said once; later OOMs are left alone
            fail(PART, error)

    def _write_oom_files(self, device: int) -> list[str]:
        torch = self._torch_of()
        written: list[str] = []
        if self.rank_dir is None or self.safeio is None:
            return written
        summary = torch.cuda.memory_summary(device=device)
        self._write_file("memory_summary.txt", summary.encode("utf-8", "replace"))
        written.append("memory_summary.txt")
        memory = getattr(torch.cuda, "memory", None)
        snapshot_of = getattr(memory, "_snapshot", None)
        if snapshot_of is not None:
            snapshot = snapshot_of()
            if any(snapshot.get("device_traces") or ()):  # the history was being recorded
                import pickle

                self._write_file("memory_snapshot.pickle", pickle.dumps(snapshot))
                written.append("memory_snapshot.pickle")
        return written

    def _write_file(self, name: str, data: bytes) -> None:
        """Write-then-rename into the rank's folder, never through a planted name."""
        rank_dir, safeio = self.rank_dir, self.safeio
        if rank_dir is None or safeio is None:
            return  # _write_oom_files checked both
        final = os.path.join(rank_dir, name)
        temp = os.path.join(rank_dir, f".{name}.{os.getpid()}.tmp")
        try:
            os.unlink(temp)
        except OSError:
            pass
        fd = safeio.create_new(temp)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(temp, final)
        except BaseException:
            try:
                os.unlink(temp)
            except OSError:
                pass
            raise
