"""Post-import hooks: run a function right after the program imports a module.

The agent never imports torch itself. It asks to be called when the program's own import
of, say, `torch.distributed.distributed_c10d` has executed that module, before the import
statement returns: the module's functions can then be wrapped before anything else
(`torch.distributed`'s `from .distributed_c10d import *`, the program's `from
torch.distributed import all_reduce`) takes a reference to them.

How: a finder first on `sys.meta_path` answers only for the watched names. It asks the
finders after it for the real spec, and gives that spec's loader an `exec_module` of the
instance that executes the module as before, then calls the hooks. The spec, the loader's
class and the module are the ones Python would have used. Everything that can fail here
falls back to the normal import: a failing hook is reported (`events.fail`) and the import
goes on.
"""

from __future__ import annotations

import sys
import threading

from .eventlog import fail

TYPE_CHECKING = False  # typing is not imported in ranks; mypy reads this block
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from importlib.machinery import ModuleSpec
    from types import ModuleType
    from typing import Any

    Hook = Callable[[ModuleType], object]


class _PostImportFinder:
    def __init__(self) -> None:
        self.waiting: dict[str, list[tuple[str, Hook]]] = {}
        self.lock = threading.RLock()

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: ModuleType | None = None,
    ) -> ModuleSpec | None:
        if fullname not in self.waiting:
            return None
        try:
            spec = self._real_spec(fullname, path, target)
            if spec is None or not self._wrap_loader(spec.loader, fullname):
                return None
        except Exception:
            return None  # the import machinery asks the other finders itself
        return spec

    def _real_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None
    ) -> ModuleSpec | None:
        for finder in list(sys.meta_path):
            if finder is self:
                continue
            find_spec = getattr(finder, "find_spec", None)
            if find_spec is None:
                continue
            spec = find_spec(fullname, path, target)
            if spec is not None:
                return spec
        return None

    def _wrap_loader(self, loader: Any, fullname: str) -> bool:
        if loader is None or isinstance(loader, type) or not hasattr(loader, "exec_module"):
            return False
        original = loader.exec_module
        own = "exec_module" in getattr(loader, "__dict__", {})

        def exec_module(module: ModuleType) -> None:
            if getattr(module, "__name__", None) != fullname:
                return original(module)  # a loader shared with another module
            try:
                original(module)
            finally:
                try:
                    if own:
                        loader.exec_module = original
                    else:
                        del loader.exec_module
                except Exception:
                    pass
            self.fire(fullname, module)

        loader.exec_module = exec_module
        return True

    def fire(self, fullname: str, module: ModuleType) -> None:
        with self.lock:
            hooks = self.waiting.pop(fullname, [])
        for part, hook in hooks:
            run_hook(part, hook, module)


def run_hook(part: str, hook: Hook, module: ModuleType) -> None:
    try:
        hook(module)
    except Exception as error:
        fail(part, error)


_finder: _PostImportFinder | None = None


def _installed() -> _PostImportFinder:
    global _finder
    if _finder is None or _finder not in sys.meta_path:
        _finder = _finder or _PostImportFinder()
        sys.meta_path.insert(0, _finder)
    return _finder


def when_imported(name: str, hook: Hook, part: str) -> None:
    """Call `hook(module)` once `name` has been imported: now if it already was, else right
    after the program's import executes it. A hook that raises is `eventlog.fail(part, ...)`."""
    module = sys.modules.get(name)
    spec = getattr(module, "__spec__", None)
    if module is not None and not getattr(spec, "_initializing", False):
        run_hook(part, hook, module)
        return
    finder = _installed()
    with finder.lock:
        finder.waiting.setdefault(name, []).append((part, hook))
