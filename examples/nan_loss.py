"""A NaN appears: from step 5 rank 1's data holds an inf, and its loss turns NaN.

    mldebug run --nproc-per-node 2 examples/nan_loss.py

DDP averages gradients across ranks, so left alone one rank's bad batch would poison every
rank's weights at the next step. The script stops at the first NaN loss with an error, as a
training loop with a NaN guard would, and mldebug names rank 1 and the line.
"""

import math

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

BAD_RANK = 1
BAD_STEP = 5


def batch(step: int, rank: int) -> torch.Tensor:
    data = torch.randn(16, 32)
    if rank == BAD_RANK and step >= BAD_STEP:
        data[0, 0] = float("inf")  # one broken sample: inf * weight - inf ... -> NaN
    return data


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(torch.nn.Linear(32, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(10):
        out = model(batch(step, rank))
        loss = (out - out.mean()).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        value = loss.item()
        print(f"step {step} loss {value:.4f}", flush=True)
        if math.isnan(value):
            raise FloatingPointError(f"loss is NaN at step {step} on rank {rank}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
