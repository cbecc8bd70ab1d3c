"""`mldebug run --tiny-model` on unmodified scripts that load big models by hub name, with
the real transformers, offline (HF_HUB_OFFLINE=1) and an empty Hugging Face cache.

Three launches: the examples' six-model script on one rank, the DDP example on two gloo
ranks, and a script whose model cannot be substituted (an unknown name; then fallback=load).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")
pytestmark = [pytest.mark.long, pytest.mark.multirank, pytest.mark.timeout(600)]

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
MLDEBUG = [sys.executable, "-m", "mldebug"]
SUBSTITUTED = re.compile(
    r"mldebug tiny-model: (\w+)\.from_pretrained\('([^']+)'.*-> tiny (\w+) .*; parameters ([\d,?]+) -> ([\d,]+)"
)


def run(tmp_path, name, *args, timeout=300):
    hf_home = tmp_path / "hf-home"  # empty: nothing cached
    hf_home.mkdir(exist_ok=True)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(hf_home)}
    env.pop("HF_HUB_CACHE", None)
    env.pop("TRANSFORMERS_CACHE", None)
    run_dir = tmp_path / name
    done = subprocess.run(
        [*MLDEBUG, "run", "--run-dir", str(run_dir), *map(str, args)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return done, run_dir


def events(run_dir, rank, kind="tiny_model"):
    path = run_dir / "ranks" / str(rank) / "events.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [e for e in map(json.loads, lines) if e["kind"] == kind]


def test_six_architectures_train_one_step_offline(tmp_path):
    # The defaults, vocabularies kept: Qwen2.5-7B's 152,064 tokens stay under 5 M parameters
    # because hidden shrinks below 64 for them.
    done, run_dir = run(tmp_path, "zoo", "--tiny-model", EXAMPLES / "tiny_model_zoo.py")
    assert done.returncode == 0, done.stderr[-3000:]
    found = SUBSTITUTED.findall(done.stderr)
    assert [(name, cls) for _, name, cls, _, _ in found] == [
        ("openai-community/gpt2", "GPT2LMHeadModel"),
        ("meta-llama/Llama-2-7b-hf", "LlamaForCausalLM"),
        ("mistralai/Mixtral-8x7B-v0.1", "MixtralForCausalLM"),
        ("Qwen/Qwen2.5-7B", "Qwen2ForCausalLM"),
        ("google-t5/t5-small", "T5ForConditionalGeneration"),
        ("google-bert/bert-base-uncased", "BertForMaskedLM"),
    ]
    assert found[1][0] == "LlamaForCausalLM"  # a concrete class, not only the Auto ones
    for _, name, _, before, after in found:
        assert int(after.replace(",", "")) < 5_000_000, name
        assert int(before.replace(",", "")) > 50_000_000, name  # counted, never built
    assert "6,738,415,616 -> " in done.stderr  # Llama-2-7B's parameters, from its config
    assert done.stderr.count("a byte-level stand-in tokenizer") == 6
    assert (
        len(re.findall(r"^\[\S+:0\] \S+: \w+, [\d,]+ parameters, loss \d", done.stdout, re.M)) == 6
    )
    recorded = [e for e in events(run_dir, 0) if "parameters_after" in e]
    assert [e["model_type"] for e in recorded] == [
        "gpt2",
        "llama",
        "mixtral",
        "qwen2",
        "t5",
        "bert",
    ]
    assert recorded[2]["changed"]["num_local_experts"] == "8->4"


@pytest.mark.compat  # .ci/compat: the tiny model
def test_ddp_on_two_ranks(tmp_path):
    torch = importlib.metadata.version("torch")
    if tuple(int(part) for part in torch.split("+")[0].split(".")[:2]) < (2, 6):
        pytest.skip(
            f"transformers 5 (what --tiny-model builds models with) needs torch 2.6+, not {torch}"
        )
    done, run_dir = run(
        tmp_path, "ddp", "--nproc-per-node", 2, "--tiny-model", EXAMPLES / "tiny_model_ddp.py"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    for rank in (0, 1):
        assert f":{rank}] weights equal across ranks: True" in done.stdout
        assert f":{rank}] step 2 loss" in done.stdout
        (model,) = [e for e in events(run_dir, rank) if "parameters_after" in e]
        assert model["model_class"] == "LlamaForCausalLM" and model["parameters_after"] < 5_000_000


UNKNOWN = """\
from transformers import AutoModelForCausalLM
model = AutoModelForCausalLM.from_pretrained("someone/mystery-model")
print("loaded", type(model).__name__)
"""


def test_what_cannot_be_substituted_is_the_programs_error(tmp_path):
    script = tmp_path / "load_unknown.py"
    script.write_text(UNKNOWN)
    done, run_dir = run(tmp_path, "unknown", "--tiny-model", script)
    assert done.returncode == 1
    assert (
        "TinyModelError: cannot tell the model type of 'someone/mystery-model' offline"
        in done.stderr
    )
    assert "`--tiny-model=fallback=load` loads such models normally instead" in done.stderr
    assert "root cause (first failure): rank 0" in done.stderr
    # With fallback=load the normal loader runs: offline and uncached, it fails its own way.
    done, _ = run(tmp_path, "fallback", "--tiny-model=fallback=load", script)
    assert "loading it normally (fallback=load)" in done.stderr
    assert "TinyModelError" not in done.stderr and done.returncode == 1
