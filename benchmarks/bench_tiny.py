"""Time to the first training step of GPT-2 small: the full model against
`mldebug run --tiny-model`, side by side in one run.

The same training script runs twice, in fresh processes:
  * full: `python train.py --full`, the full GPT-2 small (124 M parameters) built from its
    config with random weights (nothing downloaded), as a plain Python process;
  * tiny: `mldebug run --tiny-model train.py`, where the script's own
    `AutoModelForCausalLM.from_pretrained("openai-community/gpt2")` builds the tiny GPT-2,
    offline (HF_HUB_OFFLINE=1, an empty HF_HOME), its 50,257-token vocabulary kept;
  * tiny, vocab=4096: the same with `--tiny-model=vocab=4096`: at hidden 64 the kept
    vocabulary is most of the tiny model and of its step (the logits).
Each run trains one step (forward, backward, AdamW step) on a batch of token ids. The
script prints how long it took from the line that loads the model to the end of the first
step (GPT-2's modelling code is imported before, the same in every run); the whole command
is timed from outside (Python, torch and transformers imports, and for the tiny runs
mldebug's launcher, included).

    python benchmarks/bench_tiny.py [--batch 4] [--seq 256] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TRAIN = """\
import sys, time
import torch
from transformers import AutoModelForCausalLM, GPT2Config
import transformers.models.gpt2.modeling_gpt2  # GPT-2's code: imported the same either way

batch, seq = int(sys.argv[1]), int(sys.argv[2])
start = time.perf_counter()
if "--full" in sys.argv:
    model = AutoModelForCausalLM.from_config(GPT2Config())  # GPT-2 small's own sizes
else:
    model = AutoModelForCausalLM.from_pretrained("openai-community/gpt2")
model.train()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
ids = torch.randint(0, model.config.vocab_size, (batch, seq))
loss = model(input_ids=ids, labels=ids).loss
loss.backward()
optimizer.step()
seconds = time.perf_counter() - start
count = sum(p.numel() for p in model.parameters())
print(f"FIRST_STEP {seconds:.3f} PARAMETERS {count}", flush=True)
"""


def run(command, env) -> tuple[float, float, int]:
    """(whole command seconds, load-to-first-step seconds, parameters)."""
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)
    whole = time.perf_counter() - start
    found = re.search(r"FIRST_STEP ([\d.]+) PARAMETERS (\d+)", done.stdout)
    if done.returncode != 0 or found is None:
        sys.exit(f"{command[:4]} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return whole, float(found.group(1)), int(found.group(2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder, "train.py")
        script.write_text(TRAIN)
        Path(folder, "hf-home").mkdir()
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HOME": str(Path(folder, "hf-home"))}
        shape = [str(args.batch), str(args.seq)]
        mldebug_run = [
            sys.executable,
            "-m",
            "mldebug",
            "run",
            "--run-dir",
            str(Path(folder, "run")),
        ]
        commands = {
            "full GPT-2 small, plain python": [sys.executable, str(script), *shape, "--full"],
            "mldebug run --tiny-model": [*mldebug_run, "--tiny-model", str(script), *shape],
            "mldebug run --tiny-model=vocab=4096": [
                *mldebug_run,
                "--tiny-model=vocab=4096",
                str(script),
                *shape,
            ],
        }
        results = {}
        for _ in range(args.repeats):
            for name, command in commands.items():
                subprocess.run(["rm", "-rf", str(Path(folder, "run"))], check=True)
                results.setdefault(name, []).append(run(command, env))
    print(
        f"GPT-2 small, one training step on {args.batch} x {args.seq} tokens, "
        f"median of {args.repeats} run(s), {os.cpu_count()} CPUs"
    )
    print(f"{'':38} {'parameters':>12} {'load + first step':>18} {'whole command':>14}")
    medians = {}
    for name, rows in results.items():
        whole = statistics.median(r[0] for r in rows)
        step = statistics.median(r[1] for r in rows)
        medians[name] = (whole, step)
        print(f"{name:38} {rows[0][2]:>12,} {step:>16.2f} s {whole:>12.2f} s")
    full_whole, full_step = medians.pop(next(iter(medians)))
    for name, (whole, step) in medians.items():
        print(
            f"{name}: {full_step / step:.1f}x faster from load to first step, "
            f"{full_whole / whole:.1f}x for the whole command"
        )


if __name__ == "__main__":
    main()
