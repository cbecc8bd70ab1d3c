"""What does `mldebug run` cost a training job, compared with plain `torchrun`?

Runs the same small CPU training loop (2 ranks, gloo, DDP, a line of output every 10 steps)
under both launchers, alternating, a few times each, and prints the medians of
  * wall time: launch to exit, as the user waits for it;
  * throughput: training steps per second, timed inside rank 0 (excludes start-up).

    python benchmarks/bench_run_overhead.py [--repeats 5] [--steps 400]
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
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

steps = int(sys.argv[1])
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(rank)
model = DDP(torch.nn.Sequential(
    torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
data = torch.randn(64, 256)
for warmup in range(10):
    model(data).pow(2).mean().backward()
dist.barrier()
start = time.perf_counter()
for step in range(steps):
    loss = model(data).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if step % 10 == 0:
        print(f"step {step} loss {loss.item():.5f}", flush=True)
dist.barrier()
elapsed = time.perf_counter() - start
if rank == 0:
    print(f"bench steps_per_sec={steps / elapsed:.3f}", flush=True)
dist.destroy_process_group()
"""


def launch(kind: str, script: Path, steps: int, workdir: Path) -> tuple[float, float]:
    bindir = Path(sys.executable).parent
    if kind == "mldebug run":
        command = [
            str(bindir / "mldebug"),
            "run",
            "--nproc-per-node",
            "2",
            "--run-dir",
            str(workdir / f"run-{time.monotonic_ns()}"),
        ]
    else:
        command = [str(bindir / "torchrun"), "--standalone", "--nproc-per-node", "2"]
    command += [str(script), str(steps)]
    env = {**os.environ, "MLDEBUG_RUNS_DIR": str(workdir / "runs")}
    for attempt in (1, 2):
        start = time.perf_counter()
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
        wall = time.perf_counter() - start
        match = re.search(r"bench steps_per_sec=([\d.]+)", done.stdout)
        if done.returncode == 0 and match is not None:
            return wall, float(match[1])
        # gloo sometimes aborts in its teardown on a loaded machine, under either launcher
        print(f"  ({kind} failed with exit code {done.returncode}; attempt {attempt} of 2)")
    sys.exit(f"{kind} failed twice:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=400)
    args = parser.parse_args()
    kinds = ["torchrun", "mldebug run"]
    results: dict[str, list[tuple[float, float]]] = {kind: [] for kind in kinds}
    with tempfile.TemporaryDirectory(prefix="mldebug-bench-") as tmp:
        workdir = Path(tmp)
        script = workdir / "train.py"
        script.write_text(TRAIN)
        for repeat in range(args.repeats):
            for kind in kinds if repeat % 2 == 0 else reversed(kinds):
                wall, rate = launch(kind, script, args.steps, workdir)
                results[kind].append((wall, rate))
                print(
                    f"  run {repeat + 1} {kind:<12} wall {wall:6.2f} s  {rate:7.1f} steps/s",
                    flush=True,
                )
    print(f"\n2 ranks, gloo, DDP, {args.steps} steps, {args.repeats} runs each, medians:")
    print(f"{'launcher':<12} {'wall s':>8} {'steps/s':>9}")
    medians = {}
    for kind in kinds:
        wall = statistics.median(w for w, _ in results[kind])
        rate = statistics.median(r for _, r in results[kind])
        medians[kind] = (wall, rate)
        print(f"{kind:<12} {wall:8.2f} {rate:9.1f}")
    (base_wall, base_rate), (ml_wall, ml_rate) = medians["torchrun"], medians["mldebug run"]
    print(
        f"overhead of the medians: wall time {100 * (ml_wall / base_wall - 1):+.1f}%, "
        f"throughput {100 * (1 - ml_rate / base_rate):+.1f}% (target: under 3%)"
    )
    # Runs next to each other share the machine's load; their ratios cancel most of it.
    pairs = list(zip(results["torchrun"], results["mldebug run"], strict=True))
    wall_ratio = statistics.median(ml[0] / base[0] for base, ml in pairs)
    rate_ratio = statistics.median(ml[1] / base[1] for base, ml in pairs)
    print(
        f"overhead, median of paired runs: wall time {100 * (wall_ratio - 1):+.1f}%, "
        f"throughput {100 * (1 - rate_ratio):+.1f}%"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
