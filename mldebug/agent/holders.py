"""What holds a tensor alive: the census's answer to "which list is growing".

torch records no creating site for a tensor, but the Python object that keeps one of a
growing group alive can be found, and usually named: `gc.get_referrers` gives the container
(a list, a dict, an object), and a second look gives the variable that holds the container:
a global of a module, a local of a running function, an attribute of an object.

Each `gc.get_referrers` walks every tracked object while holding the GIL (a few tens of
milliseconds at a million objects), so this runs only for the few groups a census found
growing, within what is left of the census's time budget. Standard library only: it runs
inside the ranks.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import types

from .gcgrab import referrers_of

TYPE_CHECKING = False  # typing is not imported in ranks; mypy reads this block
if TYPE_CHECKING:
    from collections.abc import Callable

MAX_HOLDERS = 2  # containers named per tensor
MAX_NAME = 80  # characters kept of a variable's or a type's name
CONTAINERS = (list, dict, set, frozenset)
# built in place by the program (gcgrab): never taken from the collector
UNSAFE = frozenset({tuple, str, bytes})


def _short(text: str) -> str:
    return text[:MAX_NAME]


def _size(container: object) -> int | None:
    try:
        return len(container) if isinstance(container, CONTAINERS) else None
    except Exception:
        return None


def _where(frame: types.FrameType) -> str:
    code = frame.f_code
    return f"{_short(code.co_name)}() at {os.path.basename(code.co_filename)}:{frame.f_lineno}"


def _program_frames() -> list[types.FrameType]:
    """The frames of every thread but this one, innermost first."""
    mine = threading.get_ident()
    frames = []
    for ident, frame in sys._current_frames().items():
        if ident == mine:
            continue
        while frame is not None:
            frames.append(frame)
            frame = frame.f_back  # type: ignore[assignment]
    return frames


def _name(container: object, frames: list[types.FrameType]) -> tuple[str, str] | None:
    """(variable, whose) for a variable that is `container`: ("kept", "a local of train() at
    train.py:44"), ("history", "a global of trainer"), ("losses", "an attribute of Trainer")."""
    for frame in frames:
        try:
            names = frame.f_locals
        except Exception:
            continue
        for key, value in names.items():
            if value is container:
                return _short(str(key)), f"a local of {_where(frame)}"
    for module_name, module in list(sys.modules.items()):
        space = getattr(module, "__dict__", None) if isinstance(module, types.ModuleType) else None
        if not isinstance(space, dict):
            continue
        for key, value in list(space.items()):
            if value is container:
                return _short(str(key)), f"a global of {_short(module_name)}"
    return None


def _owner_attribute(container: object, skip: set[int]) -> tuple[str, str] | None:
    """An object whose attribute is `container` (its instance dict, or the object itself
    when its values are kept inline)."""
    for referrer in referrers_of(container, UNSAFE):
        if id(referrer) in skip or isinstance(referrer, types.FrameType):
            continue
        space = getattr(referrer, "__dict__", None) if not isinstance(referrer, dict) else None
        if isinstance(space, dict):
            for key, value in list(space.items()):
                if value is container:
                    return _short(str(key)), f"an attribute of {_short(type(referrer).__name__)}"
    return None


def held_by(
    obj: object, skip: set[int], deadline: float, clock: Callable[[], float] = time.monotonic
) -> list[dict]:
    """Up to MAX_HOLDERS holders of `obj`: {"type", "items", "name", "whose"} (the last two
    None when no variable holding it is found). `skip`: ids of the census's own objects."""
    frames = _program_frames()
    skip = skip | {id(frames)} | {id(f) for f in frames}
    found: list[dict] = []
    referrers = [r for r in referrers_of(obj, UNSAFE) if id(r) not in skip]
    skip |= {id(referrers)}
    for referrer in referrers:
        if len(found) >= MAX_HOLDERS or clock() > deadline:
            break
        if isinstance(referrer, types.FrameType):  # a local variable is the tensor itself
            continue
        named = _name(referrer, frames)
        if named is None and clock() < deadline:
            named = _owner_attribute(referrer, skip)
        name, whose = named if named else (None, None)
        found.append(
            {
                "type": _short(type(referrer).__name__),
                "items": _size(referrer),
                "name": name,
                "whose": whose,
            }
        )
    return found
