"""The rank's step: optimizer steps counted by a global post-step hook, or the program's own
count through `mldebug.step()`.

Several optimizers stepping in one iteration (a GAN's generator and discriminator) count
as one step: a step is counted when an optimizer steps that already stepped since the last
count, or when it is the first. Once the program calls `mldebug.step()`, its count is the
step and optimizer steps are no longer counted (both at once would count twice).
"""

from __future__ import annotations

import threading
import time

from .eventlog import fail, fault_point

TYPE_CHECKING = False  # typing is not imported in ranks; mypy reads this block
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

PART = "steps"


class Steps:
    def __init__(
        self,
        on_change: Callable[[int, float], object] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.value: int | None = None
        self.time: float | None = None
        self.explicit = False
        self.off = False
        self._round: set[int] = set()
        self._on_change = on_change
        self._clock = clock
        self._lock = threading.Lock()

    def optimizer_stepped(
        self, optimizer: Any, args: tuple | None = None, kwargs: dict | None = None
    ) -> None:
        """torch.optim's global post-step hook: never raises into optimizer.step()."""
        if self.off or self.explicit:
            return
        try:
            fault_point(PART)
            key = id(optimizer)
            with self._lock:
                if self._round and key not in self._round:
                    self._round.add(key)
                    return
                self._round = {key}
                value = (self.value or 0) + 1
            self._moved(value)
        except Exception as error:
            self.off = True
            fail(PART, error)

    def set(self, n: int | None = None) -> None:
        """mldebug.step(n): set the step to n, or count one more with n None."""
        if self.off:
            return
        try:
            fault_point(PART)
            with self._lock:
                self.explicit = True
                value = (self.value or 0) + 1 if n is None else int(n)
            self._moved(value)
        except Exception as error:
            self.off = True
            fail(PART, error)

    def _moved(self, value: int) -> None:
        now = self._clock()
        self.value, self.time = value, now
        if self._on_change is not None:
            self._on_change(value, now)


def install(optimizer_module: Any, steps: Steps) -> None:
    """Post-import hook of torch.optim.optimizer."""
    optimizer_module.register_optimizer_step_post_hook(steps.optimizer_stepped)
