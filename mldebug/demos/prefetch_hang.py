"""The job `mldebug demo` starts: a small data-parallel training loop that hangs.

Each rank reads its batches from a background prefetch thread. On the last rank that thread
dies on a corrupt record at step 3 without telling anyone, so the rank waits forever for its
next batch while every other rank waits in the gradient all_reduce. Nothing crashes, nothing
is printed: the classic silent hang that `mldebug dump` / `attach` is for.
"""

import queue
import threading

import torch
import torch.distributed as dist

STEPS = 1000
BAD_STEP = 3


def prefetch(batches: queue.Queue, rank: int, world: int) -> None:
    generator = torch.Generator().manual_seed(rank)
    for step in range(STEPS):
        if rank == world - 1 and step == BAD_STEP:
            return  # a corrupt record: the thread ends, and nobody notices
        batches.put(torch.randn(32, 16, generator=generator))


def next_batch(batches: queue.Queue) -> torch.Tensor:
    return batches.get()  # blocks for ever once the prefetch thread is gone


def average_gradients(model: torch.nn.Module, world: int) -> None:
    for grad in (p.grad for p in model.parameters() if p.grad is not None):
        dist.all_reduce(grad)
        grad /= world  # in place: the parameter's own gradient


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    batches: queue.Queue = queue.Queue(maxsize=4)
    threading.Thread(target=prefetch, args=(batches, rank, world), daemon=True).start()
    for step in range(STEPS):
        batch = next_batch(batches)
        loss = model(batch).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        average_gradients(model, world)
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
