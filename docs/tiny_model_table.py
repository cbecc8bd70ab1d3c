"""Print the table of docs/tiny-model.md: each model type shrunk with the default SPEC,
built, and trained for one step (forward and backward) on random token ids.

    python docs/tiny_model_table.py

Full sizes: the checkpoint named in the first column (mldebug/tiny/names.py), else
transformers' own defaults for the type. Nothing is downloaded.
"""

from __future__ import annotations

import time

import torch

from mldebug.tiny.build import default_model_class, full_parameter_count, resolve_config
from mldebug.tiny.shrink import shrink_config

# (model type, a name to resolve: a checkpoint name or the type itself)
TRIED = [
    ("gpt2", "openai-community/gpt2"),
    ("llama", "meta-llama/Llama-2-7b-hf"),
    ("mistral", "mistralai/Mistral-7B-v0.1"),
    ("mixtral", "mistralai/Mixtral-8x7B-v0.1"),
    ("qwen2", "Qwen/Qwen2.5-7B"),
    ("qwen3", "qwen3"),
    ("qwen2_moe", "qwen2_moe"),
    ("qwen3_moe", "qwen3_moe"),
    ("gemma", "gemma"),
    ("gemma2", "gemma2"),
    ("gemma3_text", "gemma3_text"),
    ("phi3", "phi3"),
    ("gpt_neox", "EleutherAI/pythia-160m"),
    ("opt", "facebook/opt-125m"),
    ("falcon", "falcon"),
    ("deepseek_v3", "deepseek_v3"),
    ("gpt_oss", "gpt_oss"),
    ("t5", "google-t5/t5-small"),
    ("bart", "bart"),
    ("bert", "google-bert/bert-base-uncased"),
    ("roberta", "FacebookAI/roberta-base"),
    ("distilbert", "distilbert/distilbert-base-uncased"),
    ("llava", "llava"),
]


def config_of(name: str):
    from transformers import CONFIG_MAPPING

    if name in CONFIG_MAPPING:
        return CONFIG_MAPPING[name](), f"transformers' {type(CONFIG_MAPPING[name]()).__name__}()"
    return resolve_config(name).config, name


def one_step(model, config) -> None:
    text = config.get_text_config()
    ids = torch.randint(0, text.vocab_size, (2, 16))
    batch = {"input_ids": ids, "labels": ids}
    if getattr(config, "is_encoder_decoder", False):
        batch["decoder_input_ids"] = ids
    if getattr(config, "vision_config", None) is not None:
        del batch["labels"]  # vision-language: the text part only, no image
    output = model(**batch)
    loss = output.loss if output.get("loss") is not None else output[0].float().mean()
    loss.backward()


def block_kinds(config) -> str:
    """The kinds of blocks the tiny model has: attention kinds, experts, dense layers."""
    from mldebug.tiny.shrink import EXPERTS, TOP_K

    values = config.to_dict()
    kinds = list(dict.fromkeys(values.get("layer_types") or []))
    experts = [values[n] for n in EXPERTS if isinstance(values.get(n), int)]
    top = [values[n] for n in TOP_K if isinstance(values.get(n), int)]
    if experts:
        kinds.append(f"{experts[0]} experts, top-{top[0] if top else '?'}")
    if values.get("first_k_dense_replace") or values.get("mlp_only_layers"):
        kinds.append("dense + MoE layers")
    return ", ".join(kinds)


def row(model_type: str, name: str) -> str:
    try:
        full, source = config_of(name)
        small = shrink_config(full)
        model_class = default_model_class(small)
        before = full_parameter_count(model_class, full)
        start = time.perf_counter()
        model = model_class.from_config(small)
        one_step(model, small)
        seconds = time.perf_counter() - start
        after = sum(p.numel() for p in model.parameters())
        kinds = block_kinds(small.get_text_config())
        return (
            f"| {model_type} | {source} | {type(model).__name__} | {before:,} | {after:,} "
            f"| {kinds or '-'} | ok, built and one step in {seconds:.2f} s |"
        )
    except Exception as error:
        message = str(error).splitlines()[0][:120]
        return f"| {model_type} | {name} | - | - | - | - | {type(error).__name__}: {message} |"


def main() -> None:
    import transformers

    print(f"transformers {transformers.__version__}, torch {torch.__version__}, default SPEC")
    print()
    print("| type | full size from | tiny class | parameters, full | tiny | block kinds | result |")
    print("|---|---|---|---|---|---|---|")
    for model_type, name in TRIED:
        print(row(model_type, name), flush=True)


if __name__ == "__main__":
    main()
