"""What a patched `from_pretrained` does under `mldebug run --tiny-model`: the same class,
built from the shrunken config with random weights, and one report of what it did.

Called by the rank's agent (mldebug/agent/tinymodel.py) with the class the program called
`from_pretrained` on, the original method (for fallback=load and for reading local files),
the arguments, the spec and a `report(message, **fields)` that writes the log line and the
event.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .build import (
    FullConfig,
    TinyModelError,
    build,
    count_parameters,
    full_parameter_count,
    require_transformers,
    resolve_config,
)
from .shrink import ShrinkError, shrink_config
from .spec import FALLBACK_LOAD, TinySpec
from .tokenizer import stand_in_tokenizer

# from_pretrained's own arguments: about where and how to load, not about the model.
LOADING = frozenset(
    {
        "cache_dir",
        "force_download",
        "local_files_only",
        "token",
        "use_auth_token",
        "revision",
        "subfolder",
        "trust_remote_code",
        "device_map",
        "max_memory",
        "offload_folder",
        "offload_state_dict",
        "low_cpu_mem_usage",
        "quantization_config",
        "variant",
        "use_safetensors",
        "weights_only",
        "proxies",
        "resume_download",
        "output_loading_info",
        "mirror",
        "_fast_init",
        "key_mapping",
        "tp_plan",
        "tp_size",
        "device_mesh",
        "gguf_file",
        "code_revision",
        "state_dict",
        "from_tf",
        "from_flax",
        "adapter_kwargs",
        "adapter_name",
        "_from_auto",
        "_from_pipeline",
        "_commit_hash",
        "dtype",
        "torch_dtype",
        "attn_implementation",
        "distributed_config",
    }
)


SHOWN = frozenset({"dtype", "torch_dtype", "device_map", "config", "attn_implementation"})


def call_text(owner: type, name: object, kwargs: dict) -> str:
    """The call as the program made it, with the keyword arguments that matter here."""
    names = sorted(k for k in kwargs if k in SHOWN or (k not in LOADING and not k.startswith("_")))
    shown = ", ".join([repr(str(name))] + [f"{k}=..." for k in names][:4])
    return f"{owner.__name__}.from_pretrained({shown})"


def _flat(values: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in values.items():
        if isinstance(value, dict) and "model_type" in value:
            flat.update(_flat(value, f"{prefix}{key}."))
        elif isinstance(value, int) and not isinstance(value, bool):
            flat[prefix + key] = value
        elif isinstance(value, list) and key == "layer_types":
            flat[prefix + key] = f"{len(value)} ({'/'.join(dict.fromkeys(value))})"
    return flat


def changes(full: Any, small: Any) -> dict[str, str]:
    """field -> 'old->new' for every number (and layer_types) the shrinking changed."""
    before, after = _flat(full.to_dict()), _flat(small.to_dict())
    return {k: f"{before[k]}->{after[k]}" for k in before if k in after and before[k] != after[k]}


def _apply_config_kwargs(config: Any, kwargs: dict) -> list[str]:
    """from_pretrained passes its other keyword arguments to the config (num_labels=3)."""
    ignored = []
    for key in list(kwargs):
        if key in LOADING:
            continue
        value = kwargs.pop(key)
        if key == "num_labels" or hasattr(config, key):
            setattr(config, key, value)
        else:
            ignored.append(key)
    return ignored


# The loaders' arguments, as agent/tinymodel.py passes them: the class, its original
# from_pretrained, the call's name and arguments, the spec, report(message, **fields), and
# AutoConfig.from_pretrained as transformers has it.
Original = Callable[..., Any]
Report = Callable[..., object]


def load_model(
    owner: Any,
    original: Original,
    name: Any,
    args: tuple,
    kwargs: dict,
    spec: TinySpec,
    report: Report,
    autoconfig: Original | None = None,
) -> Any:
    """The model `owner.from_pretrained(name, *args, **kwargs)` asks for, tiny."""
    transformers = require_transformers()
    call = call_text(owner, name, kwargs)
    given = kwargs.get("config")
    rest = {k: v for k, v in kwargs.items() if k != "config"}  # those left go to the model
    auto = hasattr(owner, "_model_mapping")
    try:
        if isinstance(given, transformers.PretrainedConfig):
            full = FullConfig(given, "the config given")
        elif isinstance(given, (str, bytes)) or hasattr(given, "__fspath__"):
            full = resolve_config(given, None, autoconfig)
        else:
            config_class = None if auto else getattr(owner, "config_class", None)
            full = resolve_config(name, config_class, autoconfig)
        full.config = full.config.__class__.from_dict(full.config.to_dict())  # a copy to change
        ignored = _apply_config_kwargs(full.config, rest)
        small = shrink_config(full.config, spec)
    except (ShrinkError, TinyModelError) as error:
        failure: ShrinkError | TinyModelError | None = error
    else:
        failure = None
        # A tiny config AutoConfig handed out: the full one it came from is the "before".
        full = _shrunk_from.get(id(given), full)
    if failure is not None:  # outside the except: the normal load's own errors stand alone
        if spec.fallback != FALLBACK_LOAD:
            raise TinyModelError(
                f"{failure} (in {call}); `--tiny-model=fallback=load` "
                "loads such models normally instead"
            )
        report(
            f"{call}: {failure}; loading it normally (fallback=load)",
            call=call,
            fallback=True,
        )
        return original(name, *args, **kwargs)
    before = full_parameter_count(owner, full.config)
    model = build(owner, small)
    dtype = _dtype(rest.get("dtype", rest.get("torch_dtype")))
    if dtype is not None:
        model = model.to(dtype)
    model.eval()  # as from_pretrained returns it
    after = count_parameters(model)
    changed = changes(full.config, small)
    report(
        f"{call} -> tiny {type(model).__name__} "
        f"({full.config.model_type}, config from {full.source}), random weights: "
        + (_changes_text(changed) or "nothing to shrink, the config is tiny already")
        + f"; parameters {_count(before)} -> {after:,}"
        + (f"; ignored: {', '.join(ignored)}" if ignored else ""),
        call=call,
        model_class=type(model).__name__,
        model_type=full.config.model_type,
        config_source=full.source,
        changed=changed,
        parameters_before=before,
        parameters_after=after,
    )
    if rest.get("output_loading_info"):
        return model, {
            "missing_keys": [],
            "unexpected_keys": [],
            "mismatched_keys": [],
            "error_msgs": [],
        }
    return model


def _dtype(value: object) -> Any:
    """A torch dtype from from_pretrained's `dtype` (a dtype, its name, or "auto": None)."""
    import torch

    if isinstance(value, str):
        value = getattr(torch, value, None)
    return value if isinstance(value, torch.dtype) else None


# Configs handed out tiny (AutoConfig.from_pretrained) -> the full config they came from, for
# the model load they are then given to: its log says what the full model was.
_shrunk_from: dict[int, FullConfig] = {}


def _remember(small: Any, full: FullConfig) -> None:
    import weakref

    key = id(small)
    _shrunk_from[key] = full
    weakref.finalize(small, _shrunk_from.pop, key, None)


def load_config(
    owner: Any,
    original: Original,
    name: Any,
    args: tuple,
    kwargs: dict,
    spec: TinySpec,
    report: Report,
    autoconfig: Original | None = None,
) -> Any:
    """The config `owner.from_pretrained(name)` asks for, found offline and shrunk."""
    call = call_text(owner, name, kwargs)
    kwargs = dict(kwargs)
    unused = kwargs.pop("return_unused_kwargs", False)
    try:
        full = resolve_config(name, None if owner.__name__ == "AutoConfig" else owner, autoconfig)
        full.config = full.config.__class__.from_dict(full.config.to_dict())
        _apply_config_kwargs(full.config, kwargs)
        small = shrink_config(full.config, spec)
    except (ShrinkError, TinyModelError) as error:
        failure: ShrinkError | TinyModelError | None = error
    else:
        failure = None
    if failure is not None:
        if spec.fallback != FALLBACK_LOAD:
            raise TinyModelError(
                f"{failure} (in {call}); `--tiny-model=fallback=load` "
                "loads such models normally instead"
            )
        report(f"{call}: {failure}; loading it normally", fallback=True)
        return original(name, *args, return_unused_kwargs=unused, **kwargs)
    changed = changes(full.config, small)
    report(
        f"{call} -> the tiny config ({full.config.model_type}, from "
        f"{full.source}): " + (_changes_text(changed) or "nothing to shrink"),
        call=call,
        model_type=full.config.model_type,
        config_source=full.source,
        changed=changed,
    )
    _remember(small, full)
    return (small, {}) if unused else small


def _changes_text(changed: dict) -> str:
    return ", ".join(f"{key} {value}" for key, value in changed.items())


def _count(number: int | None) -> str:
    return "?" if number is None else f"{number:,}"


def load_tokenizer(
    owner: Any,
    original: Original,
    name: Any,
    args: tuple,
    kwargs: dict,
    spec: TinySpec,
    report: Report,
    autoconfig: Original | None = None,
) -> Any:
    """The tokenizer itself when it is local or cached, else the byte-level stand-in."""
    try:
        return original(name, *args, **{**kwargs, "local_files_only": True})
    except Exception as error:
        missing = f"{type(error).__name__}"
    try:
        full = resolve_config(name, None, autoconfig)
        small = shrink_config(full.config, spec)
        tokenizer = stand_in_tokenizer(small, kwargs.get("model_max_length"))
    except (ShrinkError, TinyModelError, ValueError) as error:
        raise TinyModelError(
            f"no tokenizer for {name!r} on this machine, and no stand-in: {error}"
        ) from None
    report(
        f"{call_text(owner, name, kwargs)}: no local copy ({missing}); a byte-level stand-in "
        f"tokenizer of {len(tokenizer)} tokens ({full.config.model_type}, "
        f"special tokens {', '.join(dict.fromkeys(tokenizer.all_special_tokens))})",
        call=call_text(owner, name, kwargs),
        model_type=full.config.model_type,
        tokenizer="stand-in",
        tokens=len(tokenizer),
    )
    return tokenizer
