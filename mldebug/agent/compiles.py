"""torch.compile as the rank sees it: the `compile` section of ranks/<rank>/state.json.

At each heartbeat the agent looks at its own main thread's frames (`sys._current_frames`,
the standard library; no torch hook) and asks whether one of them is one of torch's compile
entry points (`rankrules.COMPILE_FILES`). From those samples it keeps:

  * `since`: when the compile under way was first seen (the agent's clock), or null;
  * `phase`: what compiles then ("torch._inductor (C++ build)");
  * `count`: compiles seen so far (a compile shorter than a heartbeat may go unseen; one
    seen again within SAME_COMPILE seconds of its end is the same one);
  * `seconds`: seconds spent compiling in the compiles that ended, and `longest` of them;
  * `ended`: when the last of them was seen ended (memory grown while compiling is a
    warm-up, not a leak: analysis/growth.py starts after it).

The analysis says "rank 1 is compiling, for 42 s so far" from `since`, and the watchdog
compares a compile under way with the longest one before it. Cost per heartbeat: nothing
until the program imported torch._dynamo, then one walk of at most MAX_STACK frames with a
`endswith` per frame.

Stdlib only.
"""

from __future__ import annotations

import sys
import threading
import time

TYPE_CHECKING = False  # typing is not imported in ranks; mypy reads this block
if TYPE_CHECKING:
    from collections.abc import Callable
    from types import ModuleType

MAX_STACK = 400  # a dynamo + inductor compile is about 60 frames deep under the user's
# A compile seen again this soon after one ended is the same one: `torch.compile(model)`
# (it imports inductor) returned, and the model's first call compiles.
SAME_COMPILE = 3.0


class Compiles:
    def __init__(self, rules: ModuleType, clock: Callable[[], float] = time.time) -> None:
        self.off = False
        self._phase_in = rules.compile_phase_in
        self._clock = clock
        self._main = threading.main_thread().ident
        self.since: float | None = None
        self.phase: str | None = None
        self.count = 0
        self.seconds = 0.0
        self.longest = 0.0
        self.ended: float | None = None
        self._last: tuple[float, float, float] | None = None  # (since, took, longest before)

    def phase_now(self) -> str | None:
        """What the main thread compiles now (rankrules.compile_phase_in), or None."""
        if "torch._dynamo" not in sys.modules or self._main is None:
            return None  # no torch.compile without dynamo: nothing to walk
        frame = sys._current_frames().get(self._main)
        stack: list[tuple[str, str]] = []
        while frame is not None and len(stack) < MAX_STACK:
            code = frame.f_code
            stack.append((code.co_filename, code.co_name))
            frame = frame.f_back
        return self._phase_in(reversed(stack))  # outermost first

    def _begin(self, now: float) -> None:
        last = self._last
        if last is not None and self.ended is not None and now - self.ended <= SAME_COMPILE:
            # torch.compile(model) returned and its first call compiles: one compile
            since, took, longest = last
            self.since, self.seconds, self.longest = since, self.seconds - took, longest
            return
        self.since = now
        self.count += 1

    def sample(self) -> None:
        """One heartbeat's look: a compile begins, goes on or ends."""
        if self.off:
            return
        now = self._clock()
        phase = self.phase_now()
        if phase is not None:
            if self.since is None:
                self._begin(now)
            self.phase = phase
            return
        if self.since is not None:
            took = max(0.0, now - self.since)
            self._last = (self.since, took, self.longest)
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
