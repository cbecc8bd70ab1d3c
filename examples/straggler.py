"""A slow job: one rank does more work per step, and every other rank waits for it.

    mldebug run --nproc-per-node 4 examples/straggler.py --slow-rank 3 --factor 1.5
    # in another terminal:
    mldebug dump

Synchronous data parallel on CPU: each step a rank loads a batch, works for `--compute-ms`
milliseconds (busy matrix products; `--factor` times as long on `--slow-rank`), all-reduces
its gradients and its loss, and steps its optimizer. Every rank's step takes as long as the
slow rank's, so step times name nobody: the others wait for it inside all_reduce.

Other shapes of a slow (or healthy) job:

    --data-factor 2        the slow rank's DataLoader is 2x slower instead (input-bound)
    --factor 1 --jitter 0.1 --checkpoint-every 25   a healthy job: ±10% jitter on every
                           rank, a 1 s pause on rank 0 every 25 steps (a checkpoint), GC on
    --comm-kb 8192         all-reduce 8 MiB more a step (a communication-heavy job, as
                           FSDP / ZeRO-3 jobs are: half the step or more in collectives)
    --steps 0              run until stopped (the default: 400 steps)
    --ddp                  DistributedDataParallel all-reduces the gradients (in C++, during
                           backward: the Python trace does not see them; the agent reads
                           them from torch's Flight Recorder)
    --host-waits           the compute runs elsewhere, as on a GPU, and the rank's thread
                           waits for it (sleeping): a rank takes little CPU, so many ranks
                           share a few cores without slowing each other

It prints READY once the first step is done, and the step time every 50 steps.
"""

from __future__ import annotations

import argparse
import random
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset


class SlowDataset(Dataset):
    """Batches that take `delay` seconds each to make (decoding, augmenting)."""

    def __init__(self, delay: float, size: int = 1 << 20) -> None:
        self.delay = delay
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> torch.Tensor:
        if self.delay:
            time.sleep(self.delay)
        return torch.randn(64)


def work(
    model: torch.nn.Module, batch: torch.Tensor, seconds: float, host_waits: bool = False
) -> torch.Tensor:
    """`seconds` of wall time of compute, then forward and backward (the rank's work)."""
    end = time.perf_counter() + seconds
    if host_waits:
        time.sleep(seconds)  # the host waits for its device's kernels
    while time.perf_counter() < end:
        torch.mm(batch.T, batch)  # the forward pass of a bigger model
    loss = model(batch).pow(2).mean()
    loss.backward()  # DDP all-reduces the gradients here
    return loss.detach()


def checkpoint_pause(seconds: float) -> None:
    time.sleep(seconds)  # writing a checkpoint


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--slow-rank", type=int, default=-1)
    parser.add_argument("--factor", type=float, default=1.5, help="slow rank's compute factor")
    parser.add_argument("--data-factor", type=float, default=1.0, help="its data loading factor")
    parser.add_argument("--compute-ms", type=float, default=60.0)
    parser.add_argument("--data-ms", type=float, default=2.0, help="per sample")
    parser.add_argument("--jitter", type=float, default=0.0, help="random ± share of a step")
    parser.add_argument("--checkpoint-every", type=int, default=0)
    parser.add_argument("--checkpoint-seconds", type=float, default=1.0)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--ddp", action="store_true", help="DistributedDataParallel")
    parser.add_argument("--comm-kb", type=int, default=0, help="more KiB all-reduced a step")
    parser.add_argument("--host-waits", action="store_true", help="compute as a host wait")
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    slow = rank == args.slow_rank
    data_delay = args.data_ms / 1000 * (args.data_factor if slow else 1.0)
    loader = DataLoader(SlowDataset(data_delay), batch_size=8, num_workers=0)
    model: torch.nn.Module = torch.nn.Linear(64, 64)
    if args.ddp:
        model = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    compute = args.compute_ms / 1000 * (args.factor if slow else 1.0)
    rng = random.Random(rank)
    shards = torch.zeros(args.comm_kb * 256)  # float32: 256 a KiB
    started = time.perf_counter()
    for step, batch in enumerate(loader, 1):
        seconds = compute * (1 + rng.uniform(-args.jitter, args.jitter))
        loss = work(model, batch, seconds, args.host_waits)
        if not args.ddp:
            grads = torch.cat([p.grad.flatten() for p in model.parameters()])
            dist.all_reduce(grads)
            dist.all_reduce(loss)
        if args.comm_kb:
            dist.all_reduce(shards)  # the parameters' shards of a sharded model
        optimizer.step()
        optimizer.zero_grad()
        if rank == 0 and args.checkpoint_every and step % args.checkpoint_every == 0:
            checkpoint_pause(args.checkpoint_seconds)
        if step == 1:
            print(f"READY rank {rank}", flush=True)
        if step % 50 == 0:
            took = (time.perf_counter() - started) / step
            print(f"step {step}: {took * 1000:.0f} ms a step, loss {loss.item():.3f}", flush=True)
        if args.steps and step >= args.steps:
            break
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
