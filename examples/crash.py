"""A rank crashes mid-training: rank 1 raises at step 3, the others are left waiting.

    mldebug run --nproc-per-node 2 examples/crash.py

mldebug names rank 1 as the root cause (exception, file:line), stops the other ranks
and exits with rank 1's exit code.
"""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

CRASH_RANK = 1
CRASH_STEP = 3


def load_batch(step: int, rank: int) -> torch.Tensor:
    if rank == CRASH_RANK and step == CRASH_STEP:
        raise RuntimeError(f"corrupt sample in shard {rank} at step {step}")
    return torch.randn(16, 32)


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = DDP(torch.nn.Linear(32, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(10):
        loss = model(load_batch(step, rank)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
