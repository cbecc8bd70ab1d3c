"""The package's stdlib-only modules (rundir, rankrules, ledgerrules), loaded by their path
next to this package as `_mldebug_<name>`, for the agent's parts: the rank's own
environment may have no mldebug. The same cache as the package's own loader
(`mldebug.agent._sibling`), so each is loaded once per rank."""

from __future__ import annotations

import importlib.util
import os
import sys


def sibling(name: str):
    cached = sys.modules.get(f"_mldebug_{name}")
    if cached is not None:
        return cached
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    spec = importlib.util.spec_from_file_location(
        f"_mldebug_{name}", os.path.join(package, f"{name}.py")
    )
    if spec is None or spec.loader is None:
        raise ImportError(f"mldebug/{name}.py cannot be loaded")
    module = importlib.util.module_from_spec(spec)
    sys.modules[f"_mldebug_{name}"] = module
    spec.loader.exec_module(module)
    return module
