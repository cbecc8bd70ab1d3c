"""A memory leak: rank 0 keeps every step's error "to log the average at the end".

    mldebug run --nproc-per-node 2 examples/memory_leak.py

The error is computed with autograd on and kept as a tensor, not a number: it holds its
graph, and the graph holds the step's activations. Rank 0 keeps about 8 MiB more at every
step; rank 1, which logs nothing, stays flat. The script says nothing about its memory. The agent in each rank records it at every
step; rank 0 writes a `memory_growth` event (ranks/0/events.jsonl) with its rate per step,
and `mldebug dump` (or `mldebug attach`, or `mldebug run --tui`) run while it trains names
rank 0 and the rate as a finding (`mldebug recipes memory-growth`). A real job would end
when the OOM killer takes rank 0 ("killed (SIGKILL): OOM killer?"). The fix: keep
`error.item()`.
"""

import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS = 30


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(rank)
    model = DDP(torch.nn.Linear(256, 1024))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
    logged = []  # the leak, on rank 0: errors kept with their graphs
    for _ in range(STEPS):
        data, target = torch.randn(2048, 256), torch.randn(2048, 1024)
        out = model(data)
        loss = (out - target).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if rank == 0:
            logged.append((out - target).abs().mean())  # should be .item()
        time.sleep(0.1)  # the rest of a real step (data loading, logging)
    if rank == 0:
        print(f"mean error {sum(logged).item() / len(logged):.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
