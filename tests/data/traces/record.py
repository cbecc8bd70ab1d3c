"""Record the profiler traces mldebug's trace tests read: 4-rank gloo jobs under
torch.profiler, each rank writing its own Chrome trace (gzipped, as
`tensorboard_trace_handler(..., use_gzip=True)` writes it).

    python tests/data/traces/record.py [--out DIR] [balanced|slow_rank|input_bound ...]

Each scenario is a folder here (or under --out DIR) (balanced/, slow_rank/, input_bound/) with one
`rank<N>.pt.trace.json.gz` per rank. The job is a small MLP under DDP (its gradient
all_reduce runs in gloo's own thread, beside the backward pass) plus an explicit
all_reduce of the loss each step (a collective on the main thread, as a metric
reduction is):

- balanced: every rank does the same work;
- slow_rank: rank 2 does 1.5x the compute of the others each step;
- input_bound: every rank's DataLoader (num_workers=0) takes longer than the step's compute.

Only a few steps are recorded (the profiler's schedule: wait 1, warmup 1, active 10), so
each file stays small. Nothing here is read by mldebug at run time.
"""

from __future__ import annotations

import gzip
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.utils.data import DataLoader, Dataset

HERE = Path(__file__).resolve().parent
WORLD = 4
STEPS = 12  # wait 1 + warmup 1 + active 10
BATCH = 32
SLOW_RANK = 2
SCENARIOS = ("balanced", "slow_rank", "input_bound")


class Batches(Dataset):
    """Whole batches of random samples; `delay` seconds per batch stands for reading and
    decoding them (a batch at a time keeps the trace's DataLoader events few)."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(STEPS, BATCH, 256, generator=g)
        self.y = torch.randn(STEPS, BATCH, 16, generator=g)

    def __len__(self) -> int:
        return STEPS

    def __getitem__(self, index: int):
        if self.delay:
            time.sleep(self.delay)
        return self.x[index], self.y[index]


def _rank(rank: int, scenario: str, init: str, out: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=WORLD)
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 16)
    )
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    delay = 1.5 if scenario == "input_bound" else 0.0
    loader = DataLoader(Batches(delay), batch_size=None, num_workers=0)
    extra = 0.5 if (scenario == "slow_rank" and rank == SLOW_RANK) else 0.0
    work = torch.randn(512, 512)
    sched = torch.profiler.schedule(wait=1, warmup=1, active=10, repeat=1)
    handler = torch.profiler.tensorboard_trace_handler(
        out, worker_name=f"rank{rank}", use_gzip=True
    )
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU],
        schedule=sched,
        on_trace_ready=handler,
        record_shapes=True,
    ) as prof:
        for step, (x, y) in enumerate(loader):
            if step >= STEPS:
                break
            # the step's own compute: matmuls, the same on every rank but the slow one
            base = 8
            for _ in range(base + int(base * extra)):
                work = torch.mm(work, work).tanh_()
            loss = nn.functional.mse_loss(ddp(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            metric = loss.detach().clone()
            dist.all_reduce(metric)  # the logged loss, averaged over ranks
            metric.item()
            prof.step()
    dist.barrier()
    dist.destroy_process_group()


def record(scenario: str, into: Path = HERE) -> Path:
    target = into / scenario
    with tempfile.TemporaryDirectory() as tmp:
        init = f"file://{tmp}/rendezvous"
        raw = os.path.join(tmp, "out")
        mp.spawn(_rank, args=(scenario, init, raw), nprocs=WORLD, join=True)
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir()
        for name in sorted(os.listdir(raw)):
            rank = name.split(".", 1)[0]  # "rank2.<timestamp>.pt.trace.json.gz"
            with gzip.open(os.path.join(raw, name), "rb") as src:
                data = src.read()
            # mtime=0: the same trace gzips to the same bytes
            with gzip.GzipFile(target / f"{rank}.pt.trace.json.gz", "wb", mtime=0) as dst:
                dst.write(data)
    return target


if __name__ == "__main__":
    names = sys.argv[1:]
    into = HERE
    if names[:1] == ["--out"] and len(names) > 1:
        into = Path(names[1])
        into.mkdir(parents=True, exist_ok=True)
        names = names[2:]
    for name in names or SCENARIOS:
        if name not in SCENARIOS:
            sys.exit(f"record.py: no scenario {name!r}; choose from {', '.join(SCENARIOS)}")
        print(record(name, into))
