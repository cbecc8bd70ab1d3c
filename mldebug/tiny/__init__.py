"""Tiny models of the same architecture: `mldebug run --tiny-model` and a library API.

    from mldebug.tiny import shrink_config, tiny_model
    model = tiny_model("meta-llama/Llama-2-7b-hf")             # random weights, no download
    small = shrink_config(config, hidden=32, layers=3)          # a transformers config

transformers is imported only when these are called; `spec` (parsing SPEC) needs nothing.
The modules here import nothing else of mldebug: a rank loads this package by path.
"""

from __future__ import annotations

from typing import Any  # spec.py imports typing already: nothing new in a rank

from .spec import TinySpec, parse_spec


def shrink_config(config: Any, **spec: Any) -> Any:
    """A copy of a transformers config with at most `spec`'s sizes (TinySpec's fields:
    hidden, layers, heads, kv_heads, intermediate, experts, vocab). Raises
    mldebug.tiny.shrink.ShrinkError (a ValueError) naming the field it cannot shrink."""
    from .shrink import shrink_config as shrink

    return shrink(config, **spec)


def tiny_model(name_or_config: Any, model_class: Any = None, **spec: Any) -> Any:
    """A tiny model with random weights of the architecture of a hub name, a local path or a
    config; `model_class` (e.g. AutoModelForSequenceClassification) picks the head."""
    from .build import tiny_model as build

    return build(name_or_config, model_class, **spec)


__all__ = ["TinySpec", "parse_spec", "shrink_config", "tiny_model"]
