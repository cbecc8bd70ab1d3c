"""A job that gets slower: from step `--slow-from` on, every rank's DataLoader takes longer.

    mldebug run --nproc-per-node 4 examples/slows_down.py --slow-from 100
    # in another terminal:
    mldebug dump

Synchronous data parallel on CPU: each step a rank loads a batch, waits `--compute-ms`
milliseconds for its "device" (a sleep, as a host waits for a GPU), all-reduces its gradients and steps its optimizer. From step `--slow-from`
each batch takes `--slow-data-ms` to make instead of `--data-ms` (a cache that ran out, a
shard on slower storage): every rank slows down together, so no rank stands out; the
change is over time.

A healthy job with pauses (`--slow-from 0`, the default):

    --eval-every 40        an evaluation every 40 steps (`--eval-batches` batches, no step)
    --checkpoint-every 60  a checkpoint pause of `--checkpoint-seconds` on every rank
    --steps 0              run until stopped (the default)
    --hand-update          update the weights by hand, no optimizer: the program counts no
                           step, and mldebug judges its collectives' cadence instead

It prints READY once the first step is done, and the step time every 50 steps.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset


class SlowingDataset(Dataset):
    """Samples that take `delay` seconds each to make, `later` seconds from sample `after`."""

    def __init__(self, delay: float, later: float, after: int, size: int = 1 << 20) -> None:
        self.delay, self.later, self.after, self.size = delay, later, after, size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(self.later if self.after and index >= self.after else self.delay)
        return torch.randn(64)


def work(model: torch.nn.Module, batch: torch.Tensor, seconds: float) -> torch.Tensor:
    time.sleep(seconds)  # the device computing while the host waits (a GPU's forward pass)
    loss = model(batch).pow(2).mean()
    loss.backward()
    return loss.detach()


def evaluate(model: torch.nn.Module, batches: int) -> float:
    loader = DataLoader(SlowingDataset(0.005, 0.005, 0), batch_size=4)
    total = 0.0
    with torch.no_grad():
        for index, batch in enumerate(loader):
            if index >= batches:
                break
            total += model(batch).pow(2).mean().item()
    return total


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--compute-ms", type=float, default=10.0)
    parser.add_argument("--data-ms", type=float, default=1.0, help="per sample")
    parser.add_argument("--slow-data-ms", type=float, default=10.0, help="per sample, later")
    parser.add_argument("--slow-from", type=int, default=0, help="step; 0: never")
    parser.add_argument("--eval-every", type=int, default=0)
    parser.add_argument("--eval-batches", type=int, default=50)
    parser.add_argument("--checkpoint-every", type=int, default=0)
    parser.add_argument("--checkpoint-seconds", type=float, default=2.0)
    parser.add_argument("--steps", type=int, default=0)
    parser.add_argument("--hand-update", action="store_true", help="no optimizer.step()")
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    batch_size = 8
    dataset = SlowingDataset(
        args.data_ms / 1000, args.slow_data_ms / 1000, max(0, args.slow_from - 1) * batch_size
    )
    loader = DataLoader(dataset, batch_size=batch_size, num_workers=0)
    model = torch.nn.Linear(64, 64)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    started = time.perf_counter()
    for step, batch in enumerate(loader, 1):
        loss = work(model, batch, args.compute_ms / 1000)
        grads = torch.cat([p.grad.flatten() for p in model.parameters()])
        dist.all_reduce(grads)
        if args.hand_update:
            with torch.no_grad():
                for param in model.parameters():
                    param -= 1e-3 * param.grad
                    param.grad = None
        else:
            optimizer.step()
            optimizer.zero_grad()
        if args.eval_every and step % args.eval_every == 0:
            evaluate(model, args.eval_batches)
        if args.checkpoint_every and step % args.checkpoint_every == 0:
            time.sleep(args.checkpoint_seconds)  # writing a checkpoint
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
