"""A memory leak: every step keeps its activations alive in a list "for later logging".

    mldebug run --nproc-per-node 2 examples/memory_leak.py

Resident memory grows by about 8 MiB per step on every rank; the script prints it so the
growth is visible. (A real job would run out of memory and be SIGKILLed by the OOM killer,
which mldebug reports as "killed (SIGKILL): OOM killer?".)
"""

import resource

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS = 30


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    dist.init_process_group("gloo")
    model = DDP(torch.nn.Linear(1024, 1024))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
    history = []  # the leak: grows by one 2048x1024 float tensor per step
    for step in range(STEPS):
        out = model(torch.randn(2048, 1024))
        loss = out.pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        history.append(out.detach())
        if step % 5 == 0 or step == STEPS - 1:
            print(f"step {step} loss {loss.item():.4f} peak rss {rss_mib():.0f} MiB", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
