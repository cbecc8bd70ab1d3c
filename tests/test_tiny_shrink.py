"""shrink_config on real transformers config classes: the result always builds and trains.

Real parts: transformers' own config and model classes (CONFIG_MAPPING), no mocks. The
full-size configs are never built as models (only on the meta device, for counting).
"""

from __future__ import annotations

import pytest

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from mldebug.tiny import shrink_config, tiny_model  # noqa: E402
from mldebug.tiny.build import (  # noqa: E402
    TinyModelError,
    count_parameters,
    default_model_class,
    full_parameter_count,
    resolve_config,
)
from mldebug.tiny.shrink import EXPERTS, HEADS, HIDDEN, KV_HEADS, TOP_K, ShrinkError  # noqa: E402

# Decoder-only, MoE, sliding-window, latent attention, encoder-decoder, encoders, and a
# composite vision-language config: 16 types.
TYPES = [
    "gpt2",
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen3_moe",
    "gemma2",
    "gemma3_text",
    "phi3",
    "gpt_neox",
    "falcon",
    "deepseek_v3",
    "t5",
    "bart",
    "bert",
    "distilbert",
]


def full_config(model_type):
    return transformers.CONFIG_MAPPING[model_type]()


def first_int(values, names):
    return next((values[n] for n in names if isinstance(values.get(n), int)), None)


def check_valid(full, small, spec):
    """What shrink_config promises, read from the shrunken config."""
    for config, old in ((small.get_text_config(), full.get_text_config()),):
        values, before = config.to_dict(), old.to_dict()
        hidden, heads = first_int(values, HIDDEN), first_int(values, HEADS)
        assert hidden <= spec.get("hidden", 64)
        if heads:
            assert hidden % heads == 0 and heads <= spec.get("heads", 4)
            kv = first_int(values, KV_HEADS)
            assert kv is None or heads % kv == 0
        experts, top = first_int(values, EXPERTS), first_int(values, TOP_K)
        if experts:
            assert top is None or 1 <= top <= experts
        kinds = before.get("layer_types")
        if kinds:
            assert len(values["layer_types"]) == config.num_hidden_layers
            assert set(values["layer_types"]) == set(kinds)  # every kind still there
        if spec.get("vocab") is None:
            assert values["vocab_size"] == before["vocab_size"]


def train_step(model, config):
    vocab = config.get_text_config().vocab_size
    ids = torch.randint(0, vocab, (2, 8))
    batch = {"input_ids": ids, "labels": ids}
    if config.is_encoder_decoder:
        batch["decoder_input_ids"] = ids
    model(**batch).loss.backward()


specs = st.fixed_dictionaries(
    {},
    optional={
        "hidden": st.integers(8, 100),
        "layers": st.integers(1, 4),
        "heads": st.integers(1, 8),
        "kv_heads": st.just(1),
        "intermediate": st.integers(8, 200),
        "experts": st.integers(1, 6),
        "vocab": st.integers(300, 4000),
    },
)


@pytest.mark.parametrize("model_type", TYPES)
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=specs)
def test_a_shrunken_config_always_builds_and_trains(model_type, spec):
    full = full_config(model_type)
    small = shrink_config(full, **spec)
    check_valid(full, small, spec)
    model = default_model_class(small).from_config(small)
    train_step(model, small)


def test_the_vocabulary_is_kept_unless_asked():
    full = resolve_config("openai-community/gpt2").config
    assert shrink_config(full).vocab_size == 50257
    small = shrink_config(full, vocab=1000)
    assert small.vocab_size == 1000
    assert small.eos_token_id == 999 and small.bos_token_id == 999  # 50256 fits again


def test_a_large_kept_vocabulary_narrows_the_default_hidden_size(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    qwen = resolve_config("Qwen/Qwen2.5-7B").config  # 152,064 tokens, output layer untied
    small = shrink_config(qwen)
    assert small.vocab_size == 152_064 and small.hidden_size == 16
    assert count_parameters(tiny_model(qwen)) < 5_000_000
    assert shrink_config(qwen, hidden=64).hidden_size == 64  # asked for: as asked
    assert shrink_config(full_config("llama")).hidden_size == 64  # 32,000 tokens fit at 64


def test_every_kind_of_layer_stays_when_layers_are_cut():
    full = full_config("gemma3_text")  # five sliding-window layers, then a full one
    assert full.layer_types[:2] == ["sliding_attention"] * 2
    small = shrink_config(full, layers=1)
    assert small.layer_types == ["sliding_attention", "full_attention"]


def test_dense_and_moe_layers_both_stay():
    small = shrink_config(full_config("deepseek_v3"), layers=1)
    model = transformers.AutoModelForCausalLM.from_config(small)
    kinds = {type(layer.mlp).__name__ for layer in model.model.layers}
    assert len(kinds) == 2, kinds  # the first dense MLP and a MoE block


def test_experts_never_fewer_than_top_k():
    small = shrink_config(full_config("qwen3_moe"), experts=2)  # top-8 of 128 in full
    assert small.num_experts == 2 and small.num_experts_per_tok == 2


def test_explicit_head_dim_follows_hidden_and_heads():
    small = shrink_config(full_config("gemma2"), hidden=32, heads=4)
    assert small.head_dim == 8 and small.num_key_value_heads == 2  # 8 heads : 4 kv in full


def test_nested_configs_are_shrunk():
    small = shrink_config(full_config("llava"))
    assert small.text_config.hidden_size == 64 and small.vision_config.hidden_size == 64
    assert small.text_config.num_hidden_layers == 2


def test_what_cannot_be_shrunk_is_named():
    with pytest.raises(ShrinkError, match="num_key_value_heads: kv_heads=3 does not divide 4"):
        shrink_config(full_config("mistral"), kv_heads=3)
    with pytest.raises(ShrinkError, match="hidden size"):
        shrink_config(transformers.PretrainedConfig())


def test_tiny_model_from_a_hub_name_offline(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    model = tiny_model("mistralai/Mixtral-8x7B-v0.1", layers=1)
    assert type(model).__name__ == "MixtralForCausalLM"
    assert count_parameters(model) < 5_000_000
    full = resolve_config("mistralai/Mixtral-8x7B-v0.1").config
    assert full_parameter_count(transformers.AutoModelForCausalLM, full) == 46_702_792_704


def test_a_local_config_is_read(tmp_path):
    transformers.BertConfig(hidden_size=96, num_attention_heads=6, vocab_size=555).save_pretrained(
        tmp_path
    )
    found = resolve_config(str(tmp_path))
    assert found.config.vocab_size == 555 and "config.json" in found.source
    model = tiny_model(str(tmp_path), transformers.AutoModelForSequenceClassification)
    assert type(model).__name__ == "BertForSequenceClassification"


def test_an_unknown_name_says_what_to_do(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    with pytest.raises(TinyModelError, match="cannot tell the model type of 'someone/mystery'"):
        tiny_model("someone/mystery")
