"""The model type, and the full size where the name says it, of a hub name, offline.

With no local copy and no cache there is nothing to read: the name is all there is. KNOWN
holds the full-size values of well-known checkpoints (read from their public config.json on
the Hugging Face hub, the source of each row); for other names of a known family the type is
found by PATTERNS and transformers' own defaults for that type stand for the full size.
Standard library only.
"""

from __future__ import annotations

import re

HUB = "https://huggingface.co/{}/blob/main/config.json"

# Llama 3 8B, Mistral 7B and Mixtral 8x7B share their layer shapes (their configs agree).
_LLAMA3_8B_SHAPE = {
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
}

# name (lower case, without the organisation) -> (model_type, full-size fields)
KNOWN: dict[str, tuple[str, dict]] = {
    "gpt2": ("gpt2", {"n_embd": 768, "n_layer": 12, "n_head": 12, "vocab_size": 50257}),
    "gpt2-medium": ("gpt2", {"n_embd": 1024, "n_layer": 24, "n_head": 16, "vocab_size": 50257}),
    "gpt2-large": ("gpt2", {"n_embd": 1280, "n_layer": 36, "n_head": 20, "vocab_size": 50257}),
    "gpt2-xl": ("gpt2", {"n_embd": 1600, "n_layer": 48, "n_head": 25, "vocab_size": 50257}),
    "distilgpt2": ("gpt2", {"n_embd": 768, "n_layer": 6, "n_head": 12, "vocab_size": 50257}),
    "llama-2-7b-hf": (
        "llama",
        {
            "hidden_size": 4096,
            "intermediate_size": 11008,
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "num_key_value_heads": 32,
            "vocab_size": 32000,
            "max_position_embeddings": 4096,
        },
    ),
    "llama-2-13b-hf": (
        "llama",
        {
            "hidden_size": 5120,
            "intermediate_size": 13824,
            "num_hidden_layers": 40,
            "num_attention_heads": 40,
            "num_key_value_heads": 40,
            "vocab_size": 32000,
            "max_position_embeddings": 4096,
        },
    ),
    "llama-2-70b-hf": (
        "llama",
        {
            "hidden_size": 8192,
            "intermediate_size": 28672,
            "num_hidden_layers": 80,
            "num_attention_heads": 64,
            "num_key_value_heads": 8,
            "vocab_size": 32000,
            "max_position_embeddings": 4096,
        },
    ),
    "meta-llama-3-8b": (
        "llama",
        {
            **_LLAMA3_8B_SHAPE,
            "vocab_size": 128256,
            "max_position_embeddings": 8192,
        },
    ),
    "mistral-7b-v0.1": (
        "mistral",
        {
            **_LLAMA3_8B_SHAPE,
            "vocab_size": 32000,
            "max_position_embeddings": 32768,
            "sliding_window": 4096,
        },
    ),
    "mixtral-8x7b-v0.1": (
        "mixtral",
        {
            **_LLAMA3_8B_SHAPE,
            "vocab_size": 32000,
            "num_local_experts": 8,
            "num_experts_per_tok": 2,
            "max_position_embeddings": 32768,
        },
    ),
    "qwen2.5-0.5b": (
        "qwen2",
        {
            "hidden_size": 896,
            "intermediate_size": 4864,
            "num_hidden_layers": 24,
            "num_attention_heads": 14,
            "num_key_value_heads": 2,
            "vocab_size": 151936,
            "tie_word_embeddings": True,
        },
    ),
    "qwen2.5-7b": (
        "qwen2",
        {
            "hidden_size": 3584,
            "intermediate_size": 18944,
            "num_hidden_layers": 28,
            "num_attention_heads": 28,
            "num_key_value_heads": 4,
            "vocab_size": 152064,
            "tie_word_embeddings": False,
            "max_position_embeddings": 131072,
        },
    ),
    "t5-small": (
        "t5",
        {
            "decoder_start_token_id": 0,
            "d_model": 512,
            "d_ff": 2048,
            "num_layers": 6,
            "num_heads": 8,
            "d_kv": 64,
            "vocab_size": 32128,
        },
    ),
    "t5-base": (
        "t5",
        {
            "decoder_start_token_id": 0,
            "d_model": 768,
            "d_ff": 3072,
            "num_layers": 12,
            "num_heads": 12,
            "d_kv": 64,
            "vocab_size": 32128,
        },
    ),
    "t5-large": (
        "t5",
        {
            "decoder_start_token_id": 0,
            "d_model": 1024,
            "d_ff": 4096,
            "num_layers": 24,
            "num_heads": 16,
            "d_kv": 64,
            "vocab_size": 32128,
        },
    ),
    "bert-base-uncased": (
        "bert",
        {
            "hidden_size": 768,
            "intermediate_size": 3072,
            "num_hidden_layers": 12,
            "num_attention_heads": 12,
            "vocab_size": 30522,
        },
    ),
    "bert-base-cased": (
        "bert",
        {
            "hidden_size": 768,
            "intermediate_size": 3072,
            "num_hidden_layers": 12,
            "num_attention_heads": 12,
            "vocab_size": 28996,
        },
    ),
    "bert-large-uncased": (
        "bert",
        {
            "hidden_size": 1024,
            "intermediate_size": 4096,
            "num_hidden_layers": 24,
            "num_attention_heads": 16,
            "vocab_size": 30522,
        },
    ),
    "roberta-base": (
        "roberta",
        {
            "hidden_size": 768,
            "num_hidden_layers": 12,
            "num_attention_heads": 12,
            "vocab_size": 50265,
            "max_position_embeddings": 514,
            "type_vocab_size": 1,
        },
    ),
    "distilbert-base-uncased": (
        "distilbert",
        {"dim": 768, "hidden_dim": 3072, "n_layers": 6, "n_heads": 12, "vocab_size": 30522},
    ),
    "opt-125m": (
        "opt",
        {
            "hidden_size": 768,
            "ffn_dim": 3072,
            "num_hidden_layers": 12,
            "num_attention_heads": 12,
            "vocab_size": 50272,
        },
    ),
    "pythia-160m": (
        "gpt_neox",
        {
            "hidden_size": 768,
            "intermediate_size": 3072,
            "num_hidden_layers": 12,
            "num_attention_heads": 12,
            "vocab_size": 50304,
        },
    ),
}

# Where each row of KNOWN comes from (organisation/name on the hub).
SOURCES = {
    "gpt2": "openai-community/gpt2",
    "gpt2-medium": "openai-community/gpt2-medium",
    "gpt2-large": "openai-community/gpt2-large",
    "gpt2-xl": "openai-community/gpt2-xl",
    "distilgpt2": "distilbert/distilgpt2",
    "llama-2-7b-hf": "meta-llama/Llama-2-7b-hf",
    "llama-2-13b-hf": "meta-llama/Llama-2-13b-hf",
    "llama-2-70b-hf": "meta-llama/Llama-2-70b-hf",
    "meta-llama-3-8b": "meta-llama/Meta-Llama-3-8B",
    "mistral-7b-v0.1": "mistralai/Mistral-7B-v0.1",
    "mixtral-8x7b-v0.1": "mistralai/Mixtral-8x7B-v0.1",
    "qwen2.5-0.5b": "Qwen/Qwen2.5-0.5B",
    "qwen2.5-7b": "Qwen/Qwen2.5-7B",
    "t5-small": "google-t5/t5-small",
    "t5-base": "google-t5/t5-base",
    "t5-large": "google-t5/t5-large",
    "bert-base-uncased": "google-bert/bert-base-uncased",
    "bert-base-cased": "google-bert/bert-base-cased",
    "bert-large-uncased": "google-bert/bert-large-uncased",
    "roberta-base": "FacebookAI/roberta-base",
    "distilbert-base-uncased": "distilbert/distilbert-base-uncased",
    "opt-125m": "facebook/opt-125m",
    "pythia-160m": "EleutherAI/pythia-160m",
}

# Families by their names, most specific first: (pattern on the lower-case name, model_type).
PATTERNS: list[tuple[str, str]] = [
    (r"mixtral", "mixtral"),
    (r"qwen3.*(moe|-a\d+b)", "qwen3_moe"),
    (r"qwen3", "qwen3"),
    (r"qwen1\.5-moe|qwen2-moe|qwen2-57b-a14b", "qwen2_moe"),
    (r"qwen2(\.5)?-vl", "qwen2_vl"),
    (r"qwen", "qwen2"),
    (r"deepseek-v3|deepseek-r1", "deepseek_v3"),
    (r"gpt-oss", "gpt_oss"),
    (r"gemma-3|gemma3", "gemma3_text"),
    (r"gemma-2|gemma2", "gemma2"),
    (r"gemma", "gemma"),
    (r"phi-3|phi3", "phi3"),
    (r"phi-[12]|phi1|phi2", "phi"),
    (r"mistral|ministral|zephyr", "mistral"),
    (r"llava", "llava"),
    (r"llama|vicuna|tinyllama|smollm|codellama", "llama"),
    (r"falcon", "falcon"),
    (r"bloom", "bloom"),
    (r"gpt-neox|pythia", "gpt_neox"),
    (r"gpt-j", "gptj"),
    (r"distilgpt2|gpt2", "gpt2"),
    (r"mt5", "mt5"),
    (r"t5", "t5"),
    (r"bart", "bart"),
    (r"distilbert", "distilbert"),
    (r"deberta-v2|deberta-v3", "deberta-v2"),
    (r"deberta", "deberta"),
    (r"roberta", "roberta"),
    (r"electra", "electra"),
    (r"albert", "albert"),
    (r"bert", "bert"),
    (r"(^|[/-])opt-", "opt"),
]


# Values every checkpoint of a family has in its config.json that the config class's
# defaults lack (T5's decoder starts from the pad token).
FAMILY = {"t5": {"decoder_start_token_id": 0}, "mt5": {"decoder_start_token_id": 0}}


def short_name(name: str) -> str:
    """`meta-llama/Llama-2-7b-hf` -> `llama-2-7b-hf`: the part after the organisation."""
    return str(name).rstrip("/").rsplit("/", 1)[-1].lower()


def infer(name: str) -> tuple[str, dict, str] | None:
    """(model_type, full-size fields, where they come from) for a hub name; None when the
    name says nothing mldebug knows."""
    short = short_name(name)
    if short in KNOWN:
        model_type, values = KNOWN[short]
        return model_type, {**FAMILY.get(model_type, {}), **values}, HUB.format(SOURCES[short])
    lowered = str(name).lower()
    for pattern, model_type in PATTERNS:
        if re.search(pattern, lowered):
            return (
                model_type,
                dict(FAMILY.get(model_type, {})),
                f"transformers' defaults for {model_type}",
            )
    return None
