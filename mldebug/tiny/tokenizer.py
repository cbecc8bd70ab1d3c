"""A stand-in tokenizer for a model whose own tokenizer is not on this machine.

Byte-level (the `tokenizers` library's ByteLevel alphabet: 256 tokens, no merges), so any
text encodes, and small: its ids all fit the tiny model's vocabulary. The special tokens
are the family's usual ones (BERT's [CLS]/[SEP], RoBERTa's <s>/</s>, T5's </s>) at the ids
the model's config gives them where it gives any, so token ids a program takes from the
config (`config.eos_token_id`) still mean the same token.
"""

from __future__ import annotations

from typing import Any  # spec.py imports typing already: nothing new in a rank

BERT_LIKE = {"bert", "distilbert", "electra", "albert", "deberta", "deberta-v2", "megatron-bert"}
ROBERTA_LIKE = {"roberta", "bart", "xlm-roberta", "camembert", "longformer", "mbart"}
T5_LIKE = {"t5", "mt5", "umt5", "longt5"}


def _specials(model_type: str, one_end_token: bool) -> tuple[dict[str, str], str | None]:
    """(special token role -> text, the post-processing template of a single sequence).
    `one_end_token`: the config has one id for both ends of a text (GPT-2's <|endoftext|>)."""
    if model_type in BERT_LIKE:
        roles = {
            "cls_token": "[CLS]",
            "sep_token": "[SEP]",
            "pad_token": "[PAD]",
            "mask_token": "[MASK]",
            "unk_token": "[UNK]",
        }
        return roles, "[CLS] $A [SEP]"
    if model_type in ROBERTA_LIKE:
        roles = {
            "bos_token": "<s>",
            "eos_token": "</s>",
            "pad_token": "<pad>",
            "mask_token": "<mask>",
            "unk_token": "<unk>",
            "cls_token": "<s>",
            "sep_token": "</s>",
        }
        return roles, "<s> $A </s>"
    if model_type in T5_LIKE:
        return {"pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>"}, "$A </s>"
    # Decoder-only models: the pad token is the end-of-text one, as programs usually set it.
    if one_end_token:
        return dict.fromkeys(
            ("bos_token", "eos_token", "unk_token", "pad_token"), "<|endoftext|>"
        ), None
    roles = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "</s>"}
    return roles, None


def _config_ids(config: Any) -> dict[str, int]:
    """Where the config puts special tokens: role -> id."""
    ids = {}
    for role in ("pad", "bos", "eos"):
        value = getattr(config, f"{role}_token_id", None)
        if isinstance(value, list):
            value = value[0] if value else None
        if isinstance(value, int) and not isinstance(value, bool):
            ids[f"{role}_token"] = value
    return ids


def stand_in_tokenizer(config: Any, model_max_length: int | None = None) -> Any:
    """A PreTrainedTokenizerFast for the (tiny) `config`'s model."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    text_config = config.get_text_config() if hasattr(config, "get_text_config") else config
    vocab_size = getattr(text_config, "vocab_size", None) or 50257
    config_ids = _config_ids(text_config)
    one_end = "bos_token" in config_ids and config_ids["bos_token"] == config_ids.get("eos_token")
    roles, template = _specials(getattr(config, "model_type", ""), one_end)
    vocab: dict[str, int] = {}
    for role, token_id in config_ids.items():
        token = roles.get(role)
        if token is not None and token not in vocab and 0 <= token_id < vocab_size:
            if token_id not in vocab.values():
                vocab[token] = token_id
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    needed = len(alphabet) + len(set(roles.values()))
    if vocab_size < needed:
        raise ValueError(
            f"a vocabulary of {vocab_size} tokens cannot hold a byte-level stand-in tokenizer "
            f"({needed} tokens)"
        )
    taken = set(vocab.values())
    free = (i for i in range(vocab_size) if i not in taken)
    for token in dict.fromkeys(roles.values()):
        if token not in vocab:
            vocab[token] = next(free)
    for char in alphabet:
        vocab[char] = next(free)
    model = models.BPE(vocab=dict(vocab), merges=[], unk_token=roles.get("unk_token"))
    tokenizer = Tokenizer(model)
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens(list(dict.fromkeys(roles.values())))
    if template is not None:
        specials = [(t, vocab[t]) for t in dict.fromkeys(template.split()) if t != "$A"]
        tokenizer.post_processor = processors.TemplateProcessing(
            single=template,
            pair=f"{template} $B:1 {template.split()[-1]}:1",
            special_tokens=specials,
        )
    max_length = model_max_length or getattr(text_config, "max_position_embeddings", None)
    if not isinstance(max_length, int):
        max_length = getattr(text_config, "n_positions", None) or 512
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, model_max_length=max_length, **roles)
