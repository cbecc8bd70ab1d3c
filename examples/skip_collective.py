"""One rank skips a collective: the others wait for it forever.

    mldebug run --nproc-per-node 4 examples/skip_collective.py
    # in another terminal, once it stops printing:
    mldebug dump

Every step each rank averages its loss with all_reduce. Rank 1 gets an empty batch at step 3
and `continue`s past the all_reduce, so it runs out of steps one collective early and goes on
to wait for the checkpoint that rank 0 would write after training. Ranks 0, 2 and 3 sit in the
last all_reduce waiting for rank 1. `mldebug dump` names rank 1 and the line it is on.
"""

import os
import time

import torch
import torch.distributed as dist

STEPS = 6


def batch_for(rank: int, step: int) -> torch.Tensor:
    if rank == 1 and step == 3:
        return torch.empty(0)  # a shard that ran dry
    return torch.randn(16)


def wait_for_checkpoint(path: str) -> None:
    while not os.path.exists(path):
        time.sleep(0.5)


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    for step in range(STEPS):
        batch = batch_for(rank, step)
        if batch.numel() == 0:
            continue  # the bug: this rank skips the all_reduce below
        loss = batch.pow(2).mean().reshape(1)
        dist.all_reduce(loss)
        if rank == 0:
            print(f"step {step} loss {loss.item() / dist.get_world_size():.3f}", flush=True)
    print(f"rank {rank} finished training", flush=True)
    wait_for_checkpoint("/tmp/mldebug-example-checkpoint-that-never-comes.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
