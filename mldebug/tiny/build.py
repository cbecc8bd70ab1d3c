"""Find the full config for a name, count its parameters without allocating them, and build
the tiny model from the shrunken config with random weights. Nothing here downloads.

Where the config comes from, in order: a config object given; a local directory with a
config.json; the local Hugging Face cache (`local_files_only=True`); the name alone
(`names.infer`: transformers' own config class for the type, with the full-size values
mldebug knows for that checkpoint).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from .names import infer as infer_from_name
from .shrink import ShrinkError, shrink_config
from .spec import TinySpec


class TinyModelError(RuntimeError):
    """--tiny-model cannot stand in for this load (transformers missing, an unknown name, an
    architecture it cannot shrink); the message says what to do."""

    __module__ = "mldebug.tiny"  # its name in a rank's traceback, where it is loaded by path


@dataclass
class FullConfig:
    config: Any  # a transformers PretrainedConfig (tiny/ imports no transformers types)
    source: str  # where it came from, for the log


def require_transformers() -> Any:
    try:
        import transformers
    except ImportError as error:
        raise TinyModelError(
            f"tiny models (--tiny-model, mldebug.tiny) need the transformers package, which "
            f"cannot be imported ({error}); "
            "pip install transformers"
        ) from None
    return transformers


def resolve_config(
    name_or_config: Any, config_class: Any = None, original_autoconfig: Any = None
) -> FullConfig:
    """The full-size config of `name_or_config`, without downloading. `config_class`: the
    config class of the model class asked for (LlamaForCausalLM -> LlamaConfig), used when
    the name says nothing; `original_autoconfig`: AutoConfig.from_pretrained as transformers
    has it (the hooks replace the public one)."""
    transformers = require_transformers()
    if isinstance(name_or_config, transformers.PretrainedConfig):
        return FullConfig(name_or_config, "the config given")
    name = os.fspath(name_or_config)
    load = original_autoconfig or transformers.AutoConfig.from_pretrained
    if os.path.isdir(name):
        if os.path.isfile(os.path.join(name, "config.json")):
            return FullConfig(load(name, local_files_only=True), f"{name}/config.json")
    else:
        try:
            return FullConfig(load(name, local_files_only=True), "the local Hugging Face cache")
        except Exception:
            pass  # not cached: the name is all there is
    inferred = infer_from_name(name)
    if inferred is not None:
        model_type, values, source = inferred
        if config_class is not None and model_type != getattr(config_class, "model_type", None):
            return FullConfig(config_class(), f"transformers' defaults for {config_class.__name__}")
        config_class = transformers.CONFIG_MAPPING[model_type]
        return FullConfig(config_class(**values), source)
    if config_class is not None:
        return FullConfig(config_class(), f"transformers' defaults for {config_class.__name__}")
    raise TinyModelError(
        f"cannot tell the model type of {name!r} offline (no local config.json, not in the "
        "Hugging Face cache, a name mldebug does not know): pass a local path, or build the "
        "config yourself and use mldebug.tiny.tiny_model(config)"
    )


def count_parameters(model: Any) -> int:
    return sum(p.numel() for p in model.parameters())


def build(model_class: Any, config: Any, **kwargs: Any) -> Any:
    """`model_class` (an Auto class or a concrete one) built from `config`, random weights."""
    if hasattr(model_class, "_model_mapping"):
        return model_class.from_config(config, **kwargs)
    return model_class._from_config(config, **kwargs)


def full_parameter_count(model_class: Any, config: Any) -> int | None:
    """The full model's parameter count, from a build on the meta device (no memory)."""
    import torch

    try:
        with torch.device("meta"):
            return count_parameters(build(model_class, config))
    except Exception:
        return None


def default_model_class(config: Any) -> Any:
    """The Auto class that builds the whole model of `config`, head included."""
    transformers = require_transformers()
    for auto in (
        transformers.AutoModelForSeq2SeqLM,
        transformers.AutoModelForMaskedLM,
        transformers.AutoModelForCausalLM,
        transformers.AutoModelForImageTextToText,
        transformers.AutoModel,
    ):
        if type(config) in auto._model_mapping:
            return auto
    return transformers.AutoModel


def shrink(config: Any, spec: TinySpec) -> Any:
    try:
        return shrink_config(config, spec)
    except ShrinkError as error:
        raise TinyModelError(str(error)) from None


def tiny_model(
    name_or_config: Any, model_class: Any = None, spec: TinySpec | None = None, **overrides: Any
) -> Any:
    """A tiny model of the same architecture as `name_or_config` (a hub name, a local path or
    a config), with random weights: `tiny_model("meta-llama/Llama-2-7b-hf", layers=3)`.
    `model_class`: which class to build (default: the causal LM, seq2seq LM, masked LM or
    base model the config has)."""
    from dataclasses import replace

    spec = replace(spec or TinySpec(), **overrides)
    full = resolve_config(name_or_config)
    small = shrink(full.config, spec)
    return build(model_class or default_model_class(small), small)
