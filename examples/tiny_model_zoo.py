"""Six Hugging Face models loaded by hub name, one training step each (forward, backward,
optimizer step). Far too big for a laptop as written; under

    mldebug run --tiny-model examples/tiny_model_zoo.py

each `from_pretrained` builds a tiny model of the same architecture with random weights,
offline, and the script runs in seconds, unchanged.
"""

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    LlamaForCausalLM,
)

TEXT = ["the quick brown fox jumps over the lazy dog", "hello world"]


def train_step(name, model, batch):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model.train()
    loss = model(**batch).loss
    loss.backward()
    optimizer.step()
    count = sum(p.numel() for p in model.parameters())
    print(f"{name}: {type(model).__name__}, {count:,} parameters, loss {loss.item():.3f}")


def causal(name, model_class=AutoModelForCausalLM):
    tokenizer = AutoTokenizer.from_pretrained(name)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = model_class.from_pretrained(name, dtype=torch.float32)
    batch = tokenizer(TEXT, return_tensors="pt", padding=True)
    batch["labels"] = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    train_step(name, model, batch)


def masked(name):
    tokenizer = AutoTokenizer.from_pretrained(name)
    model = AutoModelForMaskedLM.from_pretrained(name)
    batch = tokenizer(TEXT, return_tensors="pt", padding=True)
    batch["labels"] = batch["input_ids"].clone()
    train_step(name, model, batch)


def seq2seq(name):
    tokenizer = AutoTokenizer.from_pretrained(name)
    model = AutoModelForSeq2SeqLM.from_pretrained(name)
    batch = tokenizer(TEXT, return_tensors="pt", padding=True)
    batch["labels"] = tokenizer(["a translation", "another"], return_tensors="pt", padding=True)[
        "input_ids"
    ]
    train_step(name, model, batch)


if __name__ == "__main__":
    causal("openai-community/gpt2")
    causal("meta-llama/Llama-2-7b-hf", LlamaForCausalLM)
    causal("mistralai/Mixtral-8x7B-v0.1")
    causal("Qwen/Qwen2.5-7B")
    seq2seq("google-t5/t5-small")
    masked("google-bert/bert-base-uncased")
