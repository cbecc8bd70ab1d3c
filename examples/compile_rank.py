"""A rank that compiles while the others wait: slow, not hung.

    mldebug run --nproc-per-node 2 --hang-timeout 5 --on-hang stop examples/compile_rank.py
    # in another terminal, while rank 1 compiles:
    mldebug dump

Each step every rank runs its model, all-reduces the loss and steps its optimizer. At step
`--compile-at` rank `--compile-rank` turns to a `torch.compile`d model (inductor) for the
rest of the run, as a rank does whose batch changed shape, or whose compile cache missed
where the others' hit: it compiles for real (tens of seconds on CPU, its C++ built by the
system compiler; a fresh TORCHINDUCTOR_CACHE_DIR makes sure nothing is cached) while the
other ranks wait for it inside all_reduce. `--compile-rank -1` compiles on no rank: a
healthy job.

`--layers N` makes the compiled graph longer (each layer is a few pointwise ops);
`--step-ms` adds that much wall time to every rank's step (a healthy job's own work).
It prints READY once the first step is done, and COMPILED on the compiling rank once its
compiled model ran its first step.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.distributed as dist


class Layers(torch.nn.Module):
    def __init__(self, width: int, layers: int) -> None:
        super().__init__()
        self.first = torch.nn.Linear(width, width)
        self.layers = layers

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.first(x)
        for _ in range(self.layers):
            x = torch.sin(x) * 1.01 + torch.cos(x * 0.5) - x.mean()
        return x


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--compile-at", type=int, default=5)
    parser.add_argument("--compile-rank", type=int, default=1)
    parser.add_argument("--layers", type=int, default=40)
    parser.add_argument("--step-ms", type=float, default=0.0)
    args = parser.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = Layers(64, args.layers)
    run = model
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    for step in range(args.steps):
        if step == args.compile_at and rank == args.compile_rank:
            run = torch.compile(model)
        loss = run(torch.randn(8, 64)).pow(2).mean()
        loss.backward()
        dist.all_reduce(loss.detach())
        optimizer.step()
        optimizer.zero_grad()
        if step == 0:
            print("READY", flush=True)
        if step == args.compile_at and run is not model:
            print("COMPILED", flush=True)
        if args.step_ms:
            time.sleep(args.step_ms / 1000)
    dist.barrier()
    print(f"rank {rank} done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
