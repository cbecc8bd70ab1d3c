"""The rank-side substitution in real processes started as ranks are (the hook first on
PYTHONPATH), without `mldebug run`'s launcher: quick checks of what the hook patches, what
it leaves alone, and what it says when transformers is missing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from mldebug.launch import env as envs

pytest.importorskip("transformers")


def hooked(tmp_path, code, python=sys.executable, tiny="", cwd=None):
    env = {**os.environ, **envs.hook_env(dict(os.environ), tmp_path / "run", envs.MODE_NATIVE)}
    env.update({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "HF_HUB_OFFLINE": "1"})
    env["HF_HOME"] = str(tmp_path / "hf-home")
    if tiny is not None:
        env[envs.ENV_TINY_MODEL] = tiny
    return subprocess.run(
        [python, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd or tmp_path,
    )


def events(tmp_path):
    path = tmp_path / "run" / "ranks" / "0" / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_the_cli_side_needs_no_transformers():
    code = "import sys, mldebug.tiny, mldebug.commands.run; print(sorted({'transformers', 'torch'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout == "[]\n", done.stderr


def test_the_library_says_when_transformers_is_missing():
    code = (
        "import sys; sys.modules['transformers'] = None\n"
        "from mldebug.tiny import tiny_model\n"
        "try:\n    tiny_model('gpt2')\nexcept Exception as error:\n    print(type(error).__name__ + ': ' + str(error))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.startswith(
        "TinyModelError: tiny models (--tiny-model, mldebug.tiny) need the transformers"
    )
    assert "pip install transformers" in done.stdout


def python_without_transformers():
    """Another Python 3 here that has no transformers (the venv's base, the system's)."""
    for other in (getattr(sys, "_base_executable", None), "/usr/bin/python3"):
        if (
            other
            and os.path.exists(other)
            and os.path.realpath(other) != os.path.realpath(sys.executable)
        ):
            probe = subprocess.run([other, "-c", "import transformers"], capture_output=True)
            if probe.returncode != 0:
                return other
    return None


def test_a_rank_without_transformers_is_told_once(tmp_path):
    other = python_without_transformers()
    if other is None:
        pytest.skip("every Python here has transformers")
    done = hooked(tmp_path, "print('runs on')", python=other)
    assert done.stdout == "runs on\n"
    assert done.stderr.startswith(
        "mldebug tiny-model: transformers is not installed in this Python"
    )
    assert [e["missing"] for e in events(tmp_path) if e["kind"] == "tiny_model"] == ["transformers"]


def test_nothing_is_patched_without_the_option(tmp_path):
    done = hooked(
        tmp_path,
        """
        from transformers import AutoModel, PreTrainedModel, AutoTokenizer
        print([hasattr(c.from_pretrained.__func__, '_mldebug_tiny_model')
               for c in (AutoModel, PreTrainedModel, AutoTokenizer)])
        """,
        tiny=None,
    )
    assert done.stdout == "[False, False, False]\n", done.stderr


def test_local_files_are_used_and_config_arguments_kept(tmp_path):
    # GIVEN a local model directory holding only a config, and a saved tokenizer
    local = tmp_path / "my-bert"
    code = f"""
        import transformers
        from mldebug.tiny.build import resolve_config
        from mldebug.tiny.tokenizer import stand_in_tokenizer
        config = transformers.BertConfig(hidden_size=96, num_attention_heads=6, vocab_size=777)
        config.save_pretrained({str(local)!r})
        stand_in_tokenizer(config).save_pretrained({str(local)!r})
        """
    subprocess.run([sys.executable, "-c", textwrap.dedent(code)], check=True, timeout=120)
    # WHEN a rank loads both by path, with a config argument
    done = hooked(
        tmp_path,
        f"""
        from transformers import AutoModelForSequenceClassification, AutoTokenizer
        tokenizer = AutoTokenizer.from_pretrained({str(local)!r})
        model = AutoModelForSequenceClassification.from_pretrained({str(local)!r}, num_labels=3)
        out = model(**tokenizer(["a b"], return_tensors="pt"))
        print(type(model).__name__, model.config.vocab_size, tuple(out.logits.shape), model.training)
        """,
        tiny="hidden=32",
    )
    # THEN the tokenizer is the saved one, the model tiny, with the config's vocabulary
    assert done.stdout == "BertForSequenceClassification 777 (1, 3) False\n", done.stderr
    assert "stand-in" not in done.stderr
    assert f"config from {local}/config.json" in done.stderr
    assert "hidden_size 96->32" in done.stderr
    (model,) = [e for e in events(tmp_path) if e["kind"] == "tiny_model"]
    assert model["model_class"] == "BertForSequenceClassification"


def test_a_config_loaded_first_is_the_tiny_one(tmp_path):
    # The pattern of transformers' own run_clm.py: AutoConfig first, then the model with it;
    # the program's own layers sized from the config match the tiny model.
    done = hooked(
        tmp_path,
        """
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig
        config = AutoConfig.from_pretrained("meta-llama/Llama-2-7b-hf")
        model = AutoModelForCausalLM.from_pretrained("meta-llama/Llama-2-7b-hf", config=config)
        head = torch.nn.Linear(config.hidden_size, 3)
        out = model(torch.tensor([[1, 2, 3]]), output_hidden_states=True)
        print(tuple(head(out.hidden_states[-1]).shape), LlamaConfig.from_pretrained("x/llama").hidden_size)
        """,
    )
    assert done.stdout == "(1, 3, 3) 64\n", done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("mldebug tiny-model:")]
    assert lines[0].startswith(
        "mldebug tiny-model: AutoConfig.from_pretrained('meta-llama/Llama-2-7b-hf') -> the tiny "
        "config (llama, from https://huggingface.co/meta-llama/Llama-2-7b-hf/blob/main/config.json)"
        ": hidden_size 4096->64"
    )
    # The model built from that tiny config reports the full model it stands for.
    assert (
        "AutoModelForCausalLM.from_pretrained('meta-llama/Llama-2-7b-hf', config=...)" in lines[1]
    )
    assert lines[1].endswith("; parameters 6,738,415,616 -> 4,227,392")
    assert "LlamaConfig.from_pretrained('x/llama') -> the tiny config" in lines[2]
