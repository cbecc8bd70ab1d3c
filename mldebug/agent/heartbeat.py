"""The heartbeat: a daemon thread that rewrites ranks/<rank>/state.json (docs/agent.md).

About every MLDEBUG_HEARTBEAT seconds (default 1) it writes the whole state atomically;
while asynchronous calls are pending it also looks at their Work objects every
POLL_INTERVAL (woken by the first one), so a completion is seen within that time. Each round holds the GIL for the
time it takes to copy the trace and encode a few kilobytes of JSON. A write that fails (a
full disk) is skipped, said once as an agent_error event (not on the program's stderr:
`mldebug run` reports the full disk), and the next round tries again. At interpreter exit the
thread writes a last state and ends; exit waits for it at most EXIT_WAIT seconds, and not
at all when it is a daemon thread killed mid-write by a hard exit.
"""

from __future__ import annotations

import os
import threading
import time

from .eventlog import fail, fault_point, warn_once
from .flight import ENV_FR_DIR, Flight, FlightDumps
from .runqueue import RunDelay
from .siblings import sibling as _sibling

TYPE_CHECKING = False  # typing is not imported in ranks; mypy reads this block
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from pathlib import Path

    from .collectives import Tracer
    from .compiles import Compiles
    from .memory import Memory
    from .steps import Steps
    from .timing import Timing

PART = "heartbeat"
ENV_INTERVAL = "MLDEBUG_HEARTBEAT"
DEFAULT_INTERVAL = _sibling("ledger.rules").DEFAULT_INTERVAL  # the one the readers assume
POLL_INTERVAL = 0.05
EXIT_WAIT = 0.5
# state.json's schema version, by the collective ledger's contract (open to added sections)
VERSION = _sibling("ledger.rules").STATE_VERSION
MAX_THREADS = 16  # other Python threads whose run-queue delay a state carries
_procfs = _sibling("files.procfs")  # the run-queue delay of the main thread, as dump reads it


def interval_from(env: Mapping[str, str]) -> float:
    try:
        value = float(env.get(ENV_INTERVAL, DEFAULT_INTERVAL))
    except (TypeError, ValueError):
        return DEFAULT_INTERVAL
    if not value == value or value <= 0:  # NaN, zero, negative
        return DEFAULT_INTERVAL
    return min(max(value, 0.05), 3600.0)


class Heartbeat:
    def __init__(
        self,
        path: Path,
        write_json: Callable[[Path, dict], object],
        rank: int,
        started: float,
        tracer: Tracer | None,
        steps: Steps | None,
        memory: Memory | None,
        interval: float = DEFAULT_INTERVAL,
        clock: Callable[[], float] = time.time,
        timing: Timing | None = None,
        compiles: Compiles | None = None,
    ) -> None:
        self.path = path
        self._write_json = write_json
        self.rank = rank
        self.pid = os.getpid()
        self.started = started
        self.tracer = tracer
        self.steps = steps
        self.memory = memory
        self.timing = timing  # agent/timing.py: the `timing` section, when on
        self.compiles = compiles  # agent/compiles.py: the `compile` section
        self.interval = interval
        self._clock = clock
        self._wake = threading.Event()
        self._stopping = False
        if tracer is not None:
            tracer.on_pending = self._wake.set
        self._thread: threading.Thread | None = None
        self.writes = 0
        self.flight = Flight(interval, started, clock=clock)  # torch's Flight Recorder
        self.flight_dumps = FlightDumps(os.environ.get(ENV_FR_DIR), rank)  # on request
        # The writing thread's run-queue delay so far, in each state: a reader that finds the
        # heartbeat late tells a starved node (the thread waited for a CPU meanwhile) from a
        # rank whose C code holds the GIL (collect/agentstate.py, analysis/sequence.py).
        self._delay = RunDelay()

    def _other_threads_delay(self, own: int) -> list[list]:
        """[[tid, seconds waited for a CPU so far], ...] of the rank's other Python threads
        (MAX_THREADS at most). A thread's count grows only once it gets a CPU again: on a
        starved node the heartbeat and the main thread may wait for seconds while the others
        run in turn, and their counts show the wait (collect/agentstate.py)."""
        found = []
        for thread in threading.enumerate():
            tid = thread.native_id
            if tid is None or tid in (own, self.pid):
                continue
            delay = _procfs.thread_run_delay(self.pid, tid)
            if delay is not None:
                found.append([tid, delay])
            if len(found) >= MAX_THREADS:
                break
        return found

    def state(self) -> dict:
        fault_point(PART)
        groups, trace = self.tracer.snapshot() if self.tracer is not None else ({}, [])
        steps = self.steps
        memory = self.memory
        state = {
            "version": VERSION,
            "rank": self.rank,
            "pid": self.pid,
            "time": self._clock(),
            "interval": self.interval,
            "started": self.started,
            "step": steps.value if steps is not None else None,
            "step_time": steps.time if steps is not None else None,
            "groups": groups,
            "trace": trace,
            "memory": memory.reading() if memory is not None else None,
            "memory_history": memory.history_rows() if memory is not None else [],
        }
        if memory is not None and hasattr(memory, "tick"):  # timeline, census (agent/memory.py)
            calls = sum(g["enqueued"]["seq"] for g in groups.values() if g.get("enqueued"))
            state.update(memory.tick(state["time"], state["memory"] or {}, state["step"], calls))
        # Not at exit: torch may be half torn down by then.
        flight = None if self._stopping else self.flight.summary(groups, state["step_time"])
        if flight is not None:
            state["flight_recorder"] = flight
        if self._stopping:  # the last state: the interpreter exits (its teardown may be long)
            state["exiting"] = True
        waited, main = self._delay.seconds(), _procfs.thread_run_delay(self.pid, self.pid)
        if waited is not None and main is not None:
            state["beat"] = {
                "tid": threading.get_native_id(),
                "run_delay": waited,
                "main_run_delay": main,  # the main thread's (its tid is the pid)
            }
            others = self._other_threads_delay(state["beat"]["tid"])
            if others:
                state["beat"]["threads"] = others
            mark = self.timing.main_step_delay() if self.timing is not None else None
            if mark is not None:
                state["beat"]["step_main_run_delay"] = mark  # at the step under way's start
        timing = self.timing
        if timing is not None and not timing.off:
            try:
                timing.sample_main()
                state["timing"] = timing.section()
            except Exception as error:  # timing stops; the heartbeat goes on
                timing.stop(error)
        compiles = self.compiles
        if compiles is not None and not compiles.off:
            try:
                compiles.sample()
                section = compiles.section()
                if section is not None:
                    state["compile"] = section
            except Exception as error:  # the compile section stops; the heartbeat goes on
                compiles.off = True
                fail("compiles", error)
        return state

    def write_once(self) -> bool:
        """One state.json; False when it could not be written (said once)."""
        state = self.state()
        try:
            self._write_json(self.path, state)
        except OSError as error:
            warn_once(
                PART,
                f"state.json cannot be written ({error.strerror or error}); "
                "skipped until it can be",
                quiet=True,
            )
            return False
        self.writes += 1
        return True

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="mldebug-heartbeat", daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        tracer = self.tracer
        if tracer is None or tracer.off:
            return
        try:
            tracer.poll()
        except Exception as error:
            tracer.stop(error)

    def _run(self) -> None:
        try:
            next_write = time.monotonic()
            while True:
                self._poll()
                if time.monotonic() >= next_write:
                    self.write_once()
                    self.flight_dumps.check()
                    next_write = time.monotonic() + self.interval
                delay = next_write - time.monotonic()
                if self.tracer is not None and self.tracer.pending:
                    delay = min(delay, POLL_INTERVAL)
                self._wake.wait(max(delay, 0.0))
                self._wake.clear()
                if self._stopping:
                    self._poll()
                    self.write_once()
                    return
        except Exception as error:
            fail(PART, error)

    def stop(self, timeout: float = EXIT_WAIT) -> None:
        """At interpreter exit: a last state, waited for at most `timeout` seconds."""
        if os.getpid() != self.pid or self._thread is None:
            return
        self._stopping = True
        self._wake.set()
        self._thread.join(timeout)
