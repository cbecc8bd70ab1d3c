"""The stand-in tokenizer: any text, ids that fit the tiny model, the family's special tokens
at the ids the config gives them. Built with the real `tokenizers` and transformers."""

from __future__ import annotations

import pytest

transformers = pytest.importorskip("transformers")

from mldebug.tiny import shrink_config  # noqa: E402
from mldebug.tiny.build import resolve_config  # noqa: E402
from mldebug.tiny.tokenizer import stand_in_tokenizer  # noqa: E402

TEXT = "naïve café, 東京 🚀\ttabs"


def tokenizer_for(name, **spec):
    config = shrink_config(resolve_config(name).config, **spec)
    return stand_in_tokenizer(config), config


@pytest.mark.parametrize(
    "name", ["openai-community/gpt2", "bert-base-uncased", "google-t5/t5-small", "roberta-base"]
)
def test_any_text_round_trips_and_fits_the_model(name):
    tokenizer, config = tokenizer_for(name, vocab=300)
    ids = tokenizer(TEXT)["input_ids"]
    assert max(ids) < config.vocab_size == 300
    assert tokenizer.decode(ids, skip_special_tokens=True) == TEXT


def test_special_tokens_sit_where_the_config_says():
    gpt2, config = tokenizer_for("openai-community/gpt2")
    assert gpt2.eos_token == "<|endoftext|>" and gpt2.eos_token_id == config.eos_token_id == 50256
    assert gpt2.pad_token_id == 50256  # decoder-only: padding with end-of-text
    bert, config = tokenizer_for("bert-base-uncased")
    ids = bert("hi")["input_ids"]
    assert bert.convert_ids_to_tokens([ids[0], ids[-1]]) == ["[CLS]", "[SEP]"]
    assert bert.pad_token_id == config.pad_token_id == 0
    t5, _ = tokenizer_for("google-t5/t5-small")
    assert t5.convert_ids_to_tokens(t5("hi")["input_ids"][-1]) == "</s>"


def test_a_vocabulary_too_small_is_said():
    config = transformers.GPT2Config(vocab_size=200)
    with pytest.raises(ValueError, match="200 tokens cannot hold a byte-level stand-in"):
        stand_in_tokenizer(config)
