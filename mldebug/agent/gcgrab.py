"""Taking objects from the garbage collector without breaking the program's own.

`gc.get_objects()` and `gc.get_referrers()` also return objects the program's thread is
still building: a tuple that `tuple(generator)` fills and then shrinks with
`_PyTuple_Resize`, which requires that nobody else holds it. A census thread that holds
such a tuple in its list while the program's thread runs on makes that call fail:
"SystemError: Objects/tupleobject.c:927: bad argument to internal function", raised in the
program (tests/test_memory_growth.py reproduces it). So the grab and the filter to the
objects wanted happen while the program cannot run, in C calls alone, and the full list is
gone before it runs again:

- the interpreter's switch interval is raised for that moment, so a thread waiting for the
  GIL does not ask for it back (each one waiting first gets the GIL once, at the
  `time.sleep(0)`, and then waits with the long interval);
- the garbage collector is paused, so that no finalizer runs Python code in between;
- the filter is `itertools.compress` over `map(kinds.__contains__, map(type, ...))`: C
  calls that run no Python code of the objects' (no `__eq__`, `__hash__` or property).

The program is held up for that moment (the walk of every object's type:
benchmarks/bench_memory_growth.py printed 44 ms for a process of 266k objects). Standard library
only: it runs inside the ranks.
"""

from __future__ import annotations

import gc
import sys
import time
from collections.abc import Callable
from itertools import compress
from operator import not_

HOLD_S = 2.0  # the switch interval while the program is held: longer than any grab


def subclasses(base: type) -> frozenset[type]:
    """`base` and every subclass of it defined so far."""
    found: set[type] = {base}
    todo = [base]
    while todo:
        sub: type
        for sub in todo.pop().__subclasses__():
            if sub not in found:
                found.add(sub)
                todo.append(sub)
    return frozenset(found)


def _held(take: Callable[..., list], *args: object) -> list:
    interval, collecting = sys.getswitchinterval(), gc.isenabled()
    sys.setswitchinterval(HOLD_S)
    try:
        time.sleep(0)  # threads already waiting take the GIL now, then wait the long interval
        gc.disable()
        return take(*args)
    finally:
        if collecting:
            gc.enable()
        sys.setswitchinterval(interval)


def objects_of(kinds: frozenset[type]) -> list:
    """Every gc-tracked object whose exact type is in `kinds`."""
    return _held(_only, kinds, gc.get_objects)


def referrers_of(obj: object, unsafe: frozenset[type]) -> list:
    """The objects that refer to `obj`, leaving out those of a type in `unsafe` (the ones a
    program builds in place: tuples, strings, bytes)."""
    # no closure over `obj`: a cell holding it would be one of its referrers
    return _held(_except, unsafe, gc.get_referrers, obj)


def _only(kinds: frozenset[type], grab: Callable[[], list]) -> list:
    objects = grab()  # held by this frame alone: gone when it returns, the program held
    return list(compress(objects, map(kinds.__contains__, map(type, objects))))


def _except(unsafe: frozenset[type], grab: Callable[[object], list], obj: object) -> list:
    objects = grab(obj)
    return list(compress(objects, map(not_, map(unsafe.__contains__, map(type, objects)))))
