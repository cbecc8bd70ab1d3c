"""What does the in-rank agent cost a training step, and what does --detect-anomaly cost
next to torch's own anomaly mode?

One small DDP training loop (an MLP, 2 ranks, gloo, one CPU thread per rank) is run, in
turn and a few times each, as:
  * plain: under torchrun, no mldebug at all;
  * agent: under `mldebug run` (heartbeat, collective trace, step count, memory);
  * detect-anomaly: under `mldebug run --detect-anomaly` (also the NaN/Inf origin hooks);
  * torch detect_anomaly: under torchrun, the loop inside `torch.autograd.detect_anomaly()`.
Rank 0 times every step after a warm-up (forward, backward with DDP's all-reduce,
optimizer step) and reports the median; the table gives the median over the runs and the
ratio to plain.

    python benchmarks/bench_agent.py [--repeats 3] [--steps 300] [--width 512] [--depth 4]
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
import contextlib, statistics, sys, time
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

steps, width, depth, batch, torch_anomaly = (int(a) for a in sys.argv[1:6])
torch.set_num_threads(1)
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(rank)
layers = []
for _ in range(depth):
    layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
model = DDP(torch.nn.Sequential(*layers, torch.nn.Linear(width, 10)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
loss_fn = torch.nn.CrossEntropyLoss()
data, target = torch.randn(batch, width), torch.randint(0, 10, (batch,))
times = []
with torch.autograd.detect_anomaly() if torch_anomaly else contextlib.nullcontext():
    for step in range(steps + 20):
        start = time.perf_counter()
        loss = loss_fn(model(data), target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        times.append(time.perf_counter() - start)
dist.barrier()
if rank == 0:
    print(f"bench step_ms={statistics.median(times[20:]) * 1e3:.4f}", flush=True)
dist.destroy_process_group()
"""

CASES = ("plain", "agent", "detect-anomaly", "torch detect_anomaly")


def command_of(case: str, script: Path, args, workdir: Path) -> list[str]:
    bindir = Path(sys.executable).parent
    if case in ("agent", "detect-anomaly"):
        command = [str(bindir / "mldebug"), "run", "--nproc-per-node", "2"]
        command += ["--run-dir", str(workdir / f"run-{time.monotonic_ns()}")]
        if case == "detect-anomaly":
            command.append("--detect-anomaly")
    else:
        command = [str(bindir / "torchrun"), "--standalone", "--nproc-per-node", "2"]
    torch_anomaly = "1" if case == "torch detect_anomaly" else "0"
    sizes = [args.steps, args.width, args.depth, args.batch]
    return [*command, str(script), *(str(n) for n in sizes), torch_anomaly]


def run_once(case: str, script: Path, args, workdir: Path) -> float:
    env = {**os.environ, "MLDEBUG_RUNS_DIR": str(workdir / "runs"), "OMP_NUM_THREADS": "1"}
    command = command_of(case, script, args, workdir)
    for attempt in (1, 2):
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)
        match = re.search(r"bench step_ms=([\d.]+)", done.stdout)
        if done.returncode == 0 and match is not None:
            return float(match[1])
        # gloo sometimes aborts in its teardown on a loaded machine, under either launcher
        print(f"  ({case} failed with exit code {done.returncode}; attempt {attempt} of 2)")
    sys.exit(f"{case} failed twice:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()
    results: dict[str, list[float]] = {case: [] for case in CASES}
    with tempfile.TemporaryDirectory(prefix="bench_agent_") as tmp:
        workdir = Path(tmp)
        script = workdir / "train.py"
        script.write_text(TRAIN)
        for repeat in range(args.repeats):
            for case in CASES:  # in turn, so a busy moment of the machine hits all of them
                results[case].append(run_once(case, script, args, workdir))
            print(
                f"run {repeat + 1}/{args.repeats}: "
                + ", ".join(f"{case} {results[case][-1]:.3f} ms" for case in CASES)
            )
    plain = statistics.median(results["plain"])
    print(
        f"\nstep time: DDP MLP {args.depth}x{args.width} (+ head), batch {args.batch}, 2 gloo "
        f"ranks, 1 thread each, median step of {args.steps}, median of {args.repeats} runs"
    )
    print(f"  {'case':<26} {'step':>10} {'vs plain':>9}")
    for case in CASES:
        median = statistics.median(results[case])
        label = {
            "plain": "plain (torchrun)",
            "agent": "mldebug run (agent)",
            "detect-anomaly": "mldebug run --detect-anomaly",
            "torch detect_anomaly": "torch.autograd.detect_anomaly",
        }[case]
        print(f"  {label:<30} {median:>7.3f} ms {median / plain:>8.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
