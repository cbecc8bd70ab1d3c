"""torch.compile as the rank sees it: the `compile` section of ranks/<rank>/state.json.

At each heartbeat the agent looks at its own main thread's frames (`sys._current_frames`,
the standard library; no torch hook) and asks whether one of them is one of torch's compile
entry points (`rankrules.COMPILE_FILES`). From those samples it keeps:

  * `since`: when the compile under way was first seen (the agent's clock), or null;
  * `phase`: what compiles then ("torch._inductor (C++ build)");
  * `count`: compiles seen so far (a compile shorter than a heartbeat may go unseen);
  * `seconds`: seconds spent compiling in the compiles that ended, and `longest` of them;
  * `ended`: when the last of them was seen ended (memory grown while compiling is a
    warm-up, not a leak: analysis/growth.py starts after it).

The analysis says "rank 1 is compiling, for 42 s so far" from `since`, and the watchdog
compares a compile under way with the longest one before it. Cost per heartbeat: nothing
until the program imported torch._dynamo, then one walk of at most MAX_STACK frames with a
dictionary lookup per frame.

Stdlib only.
"""

from __future__ import annotations

import sys
import threading
import time

TYPE_CHECKING = False  # typing is not imported in ranks; mypy reads this block
if TYPE_CHECKING:
    from collections.abc import Callable
    from types import CodeType, ModuleType

MAX_STACK = 400  # a dynamo + inductor compile is about 60 frames deep under the user's
MAX_FILES = 4096  # (file, function) pairs remembered as compile or not


class Compiles:
    def __init__(self, rules: ModuleType, clock: Callable[[], float] = time.time) -> None:
        self.off = False
        self._phase_of = rules.compile_phase_of
        self._clock = clock
        self._main = threading.main_thread().ident
        self._files: dict[tuple[str, str], str | None] = {}
        self.since: float | None = None
        self.phase: str | None = None
        self.count = 0
        self.seconds = 0.0
        self.longest = 0.0
        self.ended: float | None = None

    def _phase(self, code: CodeType) -> str | None:
        key = (code.co_filename, code.co_name)
        phase = self._files.get(key, "")
        if phase == "":
            phase = self._phase_of(*key)
            if len(self._files) < MAX_FILES:
                self._files[key] = phase
        return phase

    def phase_now(self) -> str | None:
        """What the main thread compiles now (the innermost compile frame), or None."""
        if "torch._dynamo" not in sys.modules or self._main is None:
            return None  # no torch.compile without dynamo: nothing to walk
        frame = sys._current_frames().get(self._main)
        for _ in range(MAX_STACK):
            if frame is None:
                return None
            phase = self._phase(frame.f_code)
            if phase is not None:
                return phase
            frame = frame.f_back
        return None

    def sample(self) -> None:
        """One heartbeat's look: a compile begins, goes on or ends."""
        if self.off:
            return
        now = self._clock()
        phase = self.phase_now()
        if phase is not None:
            if self.since is None:
                self.since = now
                self.count += 1
            self.phase = phase
            return
        if self.since is not None:
            took = max(0.0, now - self.since)
            self.seconds += took
            self.longest = max(self.longest, took)
            self.since = self.phase = None
            self.ended = now

    def section(self) -> dict | None:
        """The `compile` section, or None before any compile was seen."""
        if self.count == 0:
            return None
        return {
            "since": self.since,
            "phase": self.phase,
            "count": self.count,
            "seconds": round(self.seconds, 3),
            "longest": round(self.longest, 3),
            "ended": self.ended,
        }
