"""mldebug: a terminal debugging assistant for multi-rank PyTorch training.

This module stays import-light: it is loaded inside every training rank by the hooks.
"""

import operator as _operator
import sys as _sys

TYPE_CHECKING = False  # no typing (nor __future__) import in ranks; mypy reads this block
if TYPE_CHECKING:
    from typing import SupportsIndex

__version__ = "0.1.0"


def step(n: "SupportsIndex | None" = None) -> None:
    """Tell mldebug the training step: `mldebug.step()` counts one more, `mldebug.step(n)`
    sets it to n. For loops without a torch.optim optimizer (whose steps are counted by
    themselves); once called, the program's count is the step.

    In a rank started by `mldebug run` it moves the step that state.json, `dump` and
    `attach` show; anywhere else it does nothing. Raises TypeError or ValueError for an n
    that is not a whole number from 0, with or without mldebug run.
    """
    if n is not None:
        if isinstance(n, bool):
            raise TypeError("mldebug.step(n): n must be an int, not bool")
        n = _operator.index(n)
        if n < 0:
            raise ValueError(f"mldebug.step(n): n must be 0 or more, not {n}")
    agent = _sys.modules.get("_mldebug_agent")
    set_step = getattr(agent, "set_step", None)
    if set_step is not None:
        set_step(n)
