"""SPEC parsing, hub-name inference and the CLI's checks: standard library only, quick."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mldebug.tiny import names
from mldebug.tiny.spec import TinySpec, parse_spec


def test_defaults_and_overrides():
    assert parse_spec("") == TinySpec()
    spec = parse_spec("hidden=32, layers=3,kv-heads=2,vocab=4096,fallback=load")
    assert (spec.hidden, spec.layers, spec.kv_heads, spec.vocab) == (32, 3, 2, 4096)
    assert spec.fallback == "load"
    assert parse_spec(spec.to_text()) == spec
    assert parse_spec("vocab=keep").vocab is None


@pytest.mark.parametrize(
    "text, message",
    [
        ("size=3", "unknown key 'size'"),
        ("hidden", "hidden needs a value"),
        ("layers=two", "not a whole number"),
        ("hidden=4", "must be at least 8"),
        ("vocab=100", "must be at least 300"),
        ("heads=4,kv_heads=3", "must divide heads=4"),
        ("fallback=maybe", "fallback must be error or load"),
    ],
)
def test_bad_specs_say_why(text, message):
    with pytest.raises(ValueError, match=message):
        parse_spec(text)


@pytest.mark.parametrize(
    "name, model_type",
    [
        ("gpt2", "gpt2"),
        ("meta-llama/Llama-2-7b-hf", "llama"),
        ("mistralai/Mixtral-8x7B-v0.1", "mixtral"),
        ("Qwen/Qwen2.5-7B", "qwen2"),
        ("Qwen/Qwen3-30B-A3B", "qwen3_moe"),
        ("google-t5/t5-small", "t5"),
        ("bert-base-uncased", "bert"),
        ("distilbert/distilbert-base-uncased", "distilbert"),
        ("google/gemma-2-9b", "gemma2"),
        ("deepseek-ai/DeepSeek-V3", "deepseek_v3"),
        ("EleutherAI/pythia-1b", "gpt_neox"),
        ("facebook/opt-1.3b", "opt"),
    ],
)
def test_the_model_type_comes_from_the_name(name, model_type):
    assert names.infer(name)[0] == model_type


def test_known_checkpoints_carry_their_full_size_and_source():
    model_type, values, source = names.infer("meta-llama/Llama-2-7b-hf")
    assert values["hidden_size"] == 4096 and values["num_hidden_layers"] == 32
    assert source == "https://huggingface.co/meta-llama/Llama-2-7b-hf/blob/main/config.json"
    assert names.infer("someone/mystery") is None
    assert set(names.KNOWN) == set(names.SOURCES)


def mldebug_run(tmp_path, *args):
    return subprocess.run(
        [sys.executable, "-m", "mldebug", "run", "--run-dir", str(tmp_path / "run"), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_bad_spec_is_one_line_and_exit_2(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('never runs')\n")
    done = mldebug_run(tmp_path, "--tiny-model=hidden=big", str(script))
    assert done.returncode == 2
    assert done.stderr == "mldebug run: --tiny-model: hidden=big: not a whole number\n"
    assert not (tmp_path / "run").exists()


def test_the_spec_reaches_the_ranks_and_the_script_is_not_taken_for_it(tmp_path):
    from mldebug.commands.run import parse_args

    args, _, command = parse_args(["--tiny-model", "train.py", "--tiny-model=x"])
    assert args.tiny_model == "" and command[1:] == ["train.py", "--tiny-model=x"]
    args, _, command = parse_args(["--tiny-model=layers=3", "-m", "pkg.train"])
    assert args.tiny_model == "layers=3" and command[1:] == ["-m", "pkg.train"]
    args, _, _ = parse_args(["train.py"])
    assert args.tiny_model is None
