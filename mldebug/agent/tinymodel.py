"""`mldebug run --tiny-model[=SPEC]`: `from_pretrained` builds a tiny model of the same
architecture with random weights, offline, in the unmodified program.

When MLDEBUG_TINY_MODEL is set, the transformers modules the program imports are patched
right after they run (importhook): `from_pretrained` of the Auto model classes (the base
class, before the Auto classes copy it, and each Auto class of modeling_auto), of
`PreTrainedModel` (every concrete model class inherits it), of AutoConfig and
`PretrainedConfig` (the shrunken config, so that a program that reads its sizes or builds
with `from_config` gets the tiny model too), of AutoTokenizer and of
`PreTrainedTokenizerBase`. The patches load mldebug/tiny/ by path (as `_mldebug_tiny`; it
imports only transformers) when they are first called, and hand it the call.

Each substitution is one line on the rank's stderr (`mldebug tiny-model: ...`) and one
`tiny_model` event. A failure to shrink is the program's error (TinyModelError, saying
which field and why) unless SPEC says fallback=load. Stdlib only here.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading

from .eventlog import emit
from .importhook import when_imported

TYPE_CHECKING = False  # typing is not imported in ranks; mypy reads this block
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from types import ModuleType
    from typing import Any

PART = "tiny-model"
ENV_TINY_MODEL = "MLDEBUG_TINY_MODEL"  # mldebug/tiny/spec.py: the SPEC text
EVENT = "tiny_model"
PREFIX = "mldebug tiny-model: "
MARK = "_mldebug_tiny_model"  # on the patched functions (and the copies transformers makes)


def _tiny_package() -> ModuleType:
    """mldebug/tiny/, loaded by path next to the agent (the rank may have no mldebug)."""
    cached = sys.modules.get("_mldebug_tiny")
    if cached is not None:
        return cached
    directory = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tiny")
    spec = importlib.util.spec_from_file_location(
        "_mldebug_tiny",
        os.path.join(directory, "__init__.py"),
        submodule_search_locations=[directory],
    )
    if spec is None or spec.loader is None:
        raise ImportError(f"no mldebug tiny package in {directory}")
    module = importlib.util.module_from_spec(spec)
    sys.modules["_mldebug_tiny"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop("_mldebug_tiny", None)
        raise
    return module


def report(message: str, **fields: object) -> None:
    try:
        sys.stderr.write(PREFIX + message + "\n")
        sys.stderr.flush()
    except Exception:
        pass
    emit(EVENT, message, **fields)


class _Patcher:
    def __init__(self, spec_text: str) -> None:
        self.spec_text = spec_text
        self.originals: dict[tuple[Any, str], Any] = {}  # (class, name) -> the classmethod it had
        # Inside an original from_pretrained (fallback=load, a tokenizer read from local
        # files), the patched ones it calls in turn are the originals.
        self.inside = threading.local()

    def spec(self) -> tuple[ModuleType, Any]:
        package = _tiny_package()
        return package, package.parse_spec(self.spec_text)

    def wrap(self, owner_class: Any, kind: str) -> None:
        """Replace `owner_class.from_pretrained` by the substitution (once per class)."""
        key = (owner_class, "from_pretrained")
        original = owner_class.__dict__.get("from_pretrained")
        if key in self.originals or not isinstance(original, classmethod):
            return
        if getattr(original.__func__, MARK, False):
            return  # an Auto class's copy of the patched base method (auto_class_update)
        self.originals[key] = original
        patcher = self

        def from_pretrained(
            cls: type, pretrained_model_name_or_path: object, *args: Any, **kwargs: Any
        ) -> Any:
            load_original = patcher.guarded(original.__get__(None, cls))
            if getattr(patcher.inside, "depth", 0):
                return load_original(pretrained_model_name_or_path, *args, **kwargs)
            package, spec = patcher.spec()
            substitute = _substitute_module(package)
            load = getattr(substitute, f"load_{kind}")
            return load(
                cls,
                load_original,
                pretrained_model_name_or_path,
                args,
                kwargs,
                spec,
                report,
                patcher.guarded(patcher.autoconfig()),
            )

        from_pretrained.__doc__ = getattr(original.__func__, "__doc__", None)
        setattr(from_pretrained, MARK, True)
        owner_class.from_pretrained = classmethod(from_pretrained)

    def guarded(self, function: Callable[..., Any] | None) -> Any:  # None for None
        if function is None:
            return None

        def call(*args: Any, **kwargs: Any) -> Any:
            self.inside.depth = getattr(self.inside, "depth", 0) + 1
            try:
                return function(*args, **kwargs)
            finally:
                self.inside.depth -= 1

        return call

    def autoconfig(self) -> Callable[..., Any] | None:
        """AutoConfig.from_pretrained as transformers has it (for local files and the cache)."""
        configuration = sys.modules.get("transformers.models.auto.configuration_auto")
        if configuration is None:
            return None
        auto = configuration.AutoConfig
        original = self.originals.get((auto, "from_pretrained"))
        return auto.from_pretrained if original is None else original.__get__(None, auto)


def _substitute_module(package: ModuleType) -> ModuleType:
    import importlib

    return importlib.import_module(package.__name__ + ".substitute")


def start(environ: Mapping[str, str] = os.environ) -> bool:
    """Patch transformers as the program imports it, when --tiny-model asked for it."""
    spec_text = environ.get(ENV_TINY_MODEL)
    if spec_text is None:
        return False
    if importlib.util.find_spec("transformers") is None:
        report(
            "transformers is not installed in this Python, so nothing is substituted "
            f"({sys.executable}: pip install transformers)",
            missing="transformers",
        )
        return False
    patcher = _Patcher(spec_text)

    def auto_factory(module: Any) -> None:
        patcher.wrap(module._BaseAutoModelClass, "model")

    def modeling_auto(module: Any) -> None:
        for value in list(vars(module).values()):
            if isinstance(value, type) and issubclass(value, module._BaseAutoModelClass):
                patcher.wrap(value, "model")

    def modeling_utils(module: Any) -> None:
        patcher.wrap(module.PreTrainedModel, "model")

    def configuration_auto(module: Any) -> None:
        patcher.wrap(module.AutoConfig, "config")

    def configuration_utils(module: Any) -> None:
        patcher.wrap(module.PretrainedConfig, "config")

    def tokenization_auto(module: Any) -> None:
        patcher.wrap(module.AutoTokenizer, "tokenizer")

    def tokenization_base(module: Any) -> None:
        patcher.wrap(module.PreTrainedTokenizerBase, "tokenizer")

    for name, hook in (
        ("transformers.models.auto.auto_factory", auto_factory),
        ("transformers.models.auto.modeling_auto", modeling_auto),
        ("transformers.modeling_utils", modeling_utils),
        ("transformers.models.auto.configuration_auto", configuration_auto),
        ("transformers.configuration_utils", configuration_utils),
        ("transformers.models.auto.tokenization_auto", tokenization_auto),
        ("transformers.tokenization_utils_base", tokenization_base),
    ):
        when_imported(name, hook, PART)
    return True
