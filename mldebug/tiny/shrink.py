"""Shrink a transformers config: the same architecture, a few layers of a few dimensions.

The config is changed as a dict (`to_dict()`) and rebuilt by its own class, so the class's
own checks and derived fields (rope, layer types) run on the new values. Fields are found by
the names transformers' config classes use for them (GPT-2's `n_embd` is BERT's
`hidden_size` and T5's `d_model`); a field already smaller than asked for stays.

What stays valid: heads divide the hidden size and kv heads divide heads (the model's ratio
of heads to kv heads where it can), an explicit head_dim is hidden / heads, MoE experts are at
least top-k, every kind of block the full model has (dense and MoE, sliding and full
attention) is still there (`layer_types` is regenerated, never truncated), token ids of the
config fit a shrunken vocabulary, and nested configs (text/vision, encoder/decoder) are
shrunk the same way.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from .spec import DEFAULT_HIDDEN, EMBEDDING_BUDGET, MIN_AUTO_HIDDEN, TinySpec

HIDDEN = ("hidden_size", "n_embd", "d_model", "dim", "embed_dim", "word_embed_proj_dim")
INTERMEDIATE = (
    "intermediate_size",
    "n_inner",
    "d_ff",
    "ffn_dim",
    "encoder_ffn_dim",
    "decoder_ffn_dim",
    "ffn_hidden_size",
    "hidden_dim",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
)
LAYERS = (
    "num_hidden_layers",
    "n_layer",
    "num_layers",
    "num_decoder_layers",
    "encoder_layers",
    "decoder_layers",
    "n_layers",
    "depth",
)
HEADS = (
    "num_attention_heads",
    "n_head",
    "num_heads",
    "encoder_attention_heads",
    "decoder_attention_heads",
    "n_heads",
)
KV_HEADS = ("num_key_value_heads", "num_kv_heads", "multi_query_group_num")
HEAD_DIM = ("head_dim", "d_kv")
EXPERTS = ("num_local_experts", "num_experts", "n_routed_experts", "moe_num_experts")
TOP_K = ("num_experts_per_tok", "moe_topk", "num_selected_experts")
# DeepSeek's multi-head latent attention: ranks and per-part head sizes.
LATENT = {
    "kv_lora_rank": 32,
    "q_lora_rank": 32,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 8,
    "v_head_dim": 16,
}


class ShrinkError(ValueError):
    """A config this cannot shrink: which field, and why."""

    def __init__(self, model_type: str, field: str, why: str) -> None:
        super().__init__(f"cannot shrink {model_type}: {field}: {why}")
        self.model_type = model_type
        self.field = field
        self.why = why


def _ints(values: dict, names: Iterable[str]) -> list[str]:
    return [
        n for n in names if isinstance(values.get(n), int) and not isinstance(values.get(n), bool)
    ]


def _multiple_of_8(size: int, old: int) -> int:
    """`size` rounded down to a multiple of 8 when it shrinks: the grouped matmul of MoE
    layers wants rows of 16 bytes (torch: "strides should be multiple of 16 bytes")."""
    return size if size >= old else max(8, size - size % 8)


def _divisor_at_most(number: int, limit: int) -> int:
    """The largest divisor of `number` not above `limit` (at least 1)."""
    for candidate in range(max(1, min(limit, number)), 0, -1):
        if number % candidate == 0:
            return candidate
    return 1


def shrink_config(config: Any, spec: TinySpec | None = None, **overrides: Any) -> Any:
    """A copy of `config` (a transformers PretrainedConfig) shrunk to `spec`, whose fields
    `overrides` may set (`hidden=32, layers=3`). Raises ShrinkError."""
    spec = replace(spec or TinySpec(), **overrides)
    values = config.to_dict()
    _shrink_dict(values, spec, config)
    values.pop("transformers_version", None)
    try:
        return type(config).from_dict(values)
    except Exception as error:
        raise ShrinkError(
            getattr(config, "model_type", type(config).__name__),
            "config",
            f"{type(config).__name__} refused the shrunken values: {error}",
        ) from None


def _shrink_dict(values: dict, spec: TinySpec, config: Any) -> None:
    model_type = str(values.get("model_type") or getattr(config, "model_type", "?"))
    for key, sub in list(values.items()):
        if isinstance(sub, dict) and "model_type" in sub:  # a nested config: text, vision...
            _shrink_dict(sub, spec, getattr(config, key, None))
    hidden_fields = _ints(values, HIDDEN)
    if not hidden_fields and not _ints(values, LAYERS):
        if any(isinstance(v, dict) and "model_type" in v for v in values.values()):
            return  # a composite config whose parts were shrunk above
        raise ShrinkError(model_type, "hidden size", f"none of {', '.join(HIDDEN)} is set")
    old_hidden = max((values[n] for n in hidden_fields), default=0)
    limit = spec.hidden if spec.hidden is not None else _default_hidden(values, spec)
    hidden = _multiple_of_8(min(old_hidden, limit), old_hidden) if old_hidden else limit
    for name in hidden_fields:
        values[name] = min(values[name], hidden)
    heads = _shrink_heads(values, spec, hidden, model_type)
    if heads and _ints(values, HEAD_DIM) and not _ints(values, ("qk_rope_head_dim",)):
        for name in _ints(values, HEAD_DIM):
            values[name] = hidden // heads
    if isinstance(values.get("rotary_dim"), int) and heads:
        values["rotary_dim"] = min(values["rotary_dim"], hidden // heads)
    for name in _ints(values, INTERMEDIATE):
        old = values[name]
        values[name] = _multiple_of_8(min(old, spec.intermediate or 4 * hidden), old)
    for name, size in LATENT.items():
        if isinstance(values.get(name), int):
            values[name] = min(values[name], size)
    if isinstance(values.get("qk_rope_head_dim"), int) and "head_dim" in values:
        values["head_dim"] = values["qk_rope_head_dim"]
    if "qk_head_dim" in values and isinstance(values.get("qk_rope_head_dim"), int):
        values["qk_head_dim"] = values["qk_rope_head_dim"] + values.get("qk_nope_head_dim", 0)
    _shrink_experts(values, spec)
    _shrink_layers(values, spec, model_type)
    if spec.vocab is not None:
        _shrink_vocab(values, spec.vocab, model_type)


def _default_hidden(values: dict, spec: TinySpec) -> int:
    """DEFAULT_HIDDEN, or the largest multiple of 8 (at least MIN_AUTO_HIDDEN) that keeps the
    token embeddings, and the output layer when it is not tied to them, in EMBEDDING_BUDGET."""
    vocab = spec.vocab or values.get("vocab_size")
    if not isinstance(vocab, int) or vocab <= 0:
        return DEFAULT_HIDDEN
    tables = 1 if values.get("tie_word_embeddings", True) else 2
    fits = EMBEDDING_BUDGET // (vocab * tables)
    return max(MIN_AUTO_HIDDEN, min(DEFAULT_HIDDEN, fits - fits % 8))


def _heads_for(hidden: int, limit: int) -> int:
    """The most heads up to `limit` that divide `hidden` into heads of an even size of at
    least 4 (rotary embeddings rotate pairs of dimensions), else any that divide it."""
    for heads in range(max(1, min(limit, hidden)), 0, -1):
        size = hidden // heads
        if hidden % heads == 0 and size % 2 == 0 and size >= 4:
            return heads
    return _divisor_at_most(hidden, limit)


def _shrink_heads(values: dict, spec: TinySpec, hidden: int, model_type: str) -> int:
    head_fields = _ints(values, HEADS)
    if not head_fields:
        return 0
    old_heads = max(values[n] for n in head_fields)
    heads = _heads_for(hidden, min(old_heads, spec.heads))
    for name in head_fields:
        values[name] = heads
    for name in _ints(values, KV_HEADS):
        old_kv = values[name]
        if spec.kv_heads is not None:
            kv = spec.kv_heads
            if heads % kv:
                raise ShrinkError(model_type, name, f"kv_heads={kv} does not divide {heads} heads")
        elif old_kv >= old_heads:
            kv = heads
        elif old_kv and old_heads % old_kv == 0:
            kv = _divisor_at_most(heads, max(1, heads * old_kv // old_heads))
        else:
            kv = _divisor_at_most(heads, old_kv)
        values[name] = kv
    return heads


def _shrink_experts(values: dict, spec: TinySpec) -> None:
    # DeepSeek scores each group of experts by its best two: a group holds at least two.
    least = 2 if isinstance(values.get("n_group"), int) else 1
    for name in _ints(values, EXPERTS):
        values[name] = min(values[name], max(spec.experts, least))
        experts = values[name]
        for top in _ints(values, TOP_K):
            values[top] = min(values[top], experts)
        # DeepSeek routes to groups of experts first: one group holds them all.
        for group in ("n_group", "topk_group"):
            if isinstance(values.get(group), int):
                values[group] = 1


def _block_kinds_needed(values: dict, old_layers: int) -> int:
    """How many layers keep one of every kind of block the full model has."""
    needed = 1
    types = values.get("layer_types")
    if isinstance(types, list) and types:
        needed = max(needed, len(dict.fromkeys(types)))
    dense_first = values.get("first_k_dense_replace")
    if isinstance(dense_first, int) and 0 < dense_first < old_layers:
        needed = max(needed, 2)  # one dense layer, then one MoE layer
    step = values.get("decoder_sparse_step")
    if isinstance(step, int) and 1 < step <= old_layers:
        needed = max(needed, step)  # the MoE layer comes every step-th layer
    only_dense = values.get("mlp_only_layers")
    if isinstance(only_dense, list) and only_dense and len(only_dense) < old_layers:
        needed = max(needed, 2)
    return needed


def _shrink_layers(values: dict, spec: TinySpec, model_type: str) -> None:
    layer_fields = _ints(values, LAYERS)
    if not layer_fields:
        return
    old_layers = max(values[n] for n in layer_fields)
    layers = max(min(old_layers, spec.layers), _block_kinds_needed(values, old_layers))
    for name in layer_fields:
        values[name] = min(values[name], layers) if values[name] else values[name]
    types = values.get("layer_types")
    if isinstance(types, list) and types:
        values["layer_types"] = _regenerate(types, layers)
    if isinstance(values.get("first_k_dense_replace"), int) and values["first_k_dense_replace"]:
        values["first_k_dense_replace"] = min(values["first_k_dense_replace"], layers - 1) or 0
    only_dense = values.get("mlp_only_layers")
    if isinstance(only_dense, list) and only_dense:
        values["mlp_only_layers"] = [0] if len(only_dense) < old_layers else list(range(layers))
    if isinstance(values.get("max_window_layers"), int):
        values["max_window_layers"] = min(values["max_window_layers"], layers)


def _regenerate(types: list, layers: int) -> list:
    """`layers` layer types in the model's own order, with every kind it has at least once."""
    kinds = list(dict.fromkeys(types))
    new = list(types[:layers]) + [types[-1]] * max(0, layers - len(types))
    missing = [kind for kind in kinds if kind not in new]
    if missing:
        new = new[: layers - len(missing)] + missing
    return new


def _token_id_fields(values: dict) -> list[str]:
    return [
        key
        for key, value in values.items()
        if key.endswith(("_token_id", "_token_index"))
        and (isinstance(value, int) or isinstance(value, list))
    ]


def _shrink_vocab(values: dict, vocab: int, model_type: str) -> None:
    if not isinstance(values.get("vocab_size"), int):
        return
    values["vocab_size"] = min(values["vocab_size"], vocab)
    size = values["vocab_size"]
    moved: dict[int, int] = {}

    def fit(token: int) -> int:
        if not isinstance(token, int) or token < size:
            return token
        if token not in moved:  # distinct ids stay distinct, from the top down
            moved[token] = size - 1 - len(moved)
        return moved[token]

    for key in _token_id_fields(values):
        value = values[key]
        values[key] = [fit(t) for t in value] if isinstance(value, list) else fit(value)
    if len(moved) >= size:
        raise ShrinkError(
            model_type, "vocab_size", f"{size} cannot hold the config's special tokens"
        )
