"""mldebug's hook, first on the PYTHONPATH of every process of a `mldebug run` job.

Python imports `sitecustomize` at start-up, so this file runs in every rank before the
user's code. It does two things and nothing else:

1. runs the sitecustomize that would have run without mldebug (the next one on sys.path;
   Debian and some clusters ship one), so the environment behaves as before;
2. when mldebug activated it (MLDEBUG_HOOK=1), loads `mldebug.agent` by file path from
   MLDEBUG_PACKAGE_DIR and starts it. Loading by path keeps the launcher's site-packages
   off the rank's sys.path: the rank may run in another environment.

Whatever fails here prints one line and stands aside; the program runs on unchanged.
Stdlib only, no heavy imports: this runs in every Python process of the job.
"""

import os
import sys

# Annotations naming these are quoted: no `from __future__` import, as no other import,
# in every process of the job.
TYPE_CHECKING = False  # typing is not imported at start-up; mypy reads this block
if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec
    from types import ModuleType


def _say(text: str) -> None:
    try:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()
    except Exception:
        pass


def _load_module(name: str, spec: "ModuleSpec") -> "ModuleType":
    import importlib.util

    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)  # type: ignore[union-attr]  # callers checked it
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def _run_next_sitecustomize() -> "ModuleType | None":
    import importlib.machinery

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return None
    return _load_module("_mldebug_chained_sitecustomize", spec)


def _start_agent() -> "ModuleType | None":
    if os.environ.get("MLDEBUG_HOOK") != "1":
        return None
    import importlib.util

    agent_dir = os.path.join(os.environ["MLDEBUG_PACKAGE_DIR"], "agent")
    spec = importlib.util.spec_from_file_location(
        "_mldebug_agent",
        os.path.join(agent_dir, "__init__.py"),
        submodule_search_locations=[agent_dir],
    )
    if spec is None or spec.loader is None:
        raise ImportError(f"no mldebug agent in {agent_dir}")
    agent = _load_module("_mldebug_agent", spec)
    agent.activate()
    return agent


try:
    _chained = _run_next_sitecustomize()
except Exception as error:  # what Python itself does with a broken sitecustomize
    _say(
        f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(error).__name__}: {error}"
    )

try:
    _agent = _start_agent()
except Exception as error:
    _say(
        f"mldebug: hook disabled in this process ({type(error).__name__}: {error}); the program runs without it"
    )
