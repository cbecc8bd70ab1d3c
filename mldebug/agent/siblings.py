"""The package's stdlib-only modules (files/rundir.py, safeio.py, procfs.py, rankrules.py, ledger/rules.py),
loaded by their path next to this package as `_mldebug.<name>`: the rank's own environment
may have no mldebug. `_mldebug` is a bare package over mldebug's directory (its __init__
never runs), so these modules import each other relatively, and each is loaded once per
rank whichever part of the agent asks first."""

from __future__ import annotations

import importlib
import os
import sys
import types

TYPE_CHECKING = False  # typing is not imported in ranks; mypy reads this block
if TYPE_CHECKING:
    from typing import Any


def sibling(name: str) -> Any:  # a module loaded by path: its attributes are not known here
    if "_mldebug" not in sys.modules:
        package = types.ModuleType("_mldebug")
        package.__path__ = [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
        sys.modules["_mldebug"] = package
    return importlib.import_module(f"_mldebug.{name}")
