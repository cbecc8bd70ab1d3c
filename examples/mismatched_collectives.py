"""Ranks call different collectives at the same point: all_gather on some, all_reduce on others.

    mldebug run --nproc-per-node 4 examples/mismatched_collectives.py
    # in another terminal, once it stops printing:
    mldebug dump

Each rank decides on its own whether this step is a logging step, from its local sample
count. Ranks that log gather metrics with all_gather; the others go straight to the gradient
all_reduce. The two never match and the job hangs (with gloo, until a 30-minute timeout).
`mldebug dump` names both groups, their collective and their line.
"""

import torch
import torch.distributed as dist


def should_log(samples_seen: int) -> bool:
    return samples_seen % 64 == 0  # the bug: a per-rank condition guarding a collective


def log_metrics(loss: torch.Tensor) -> None:
    gathered = [torch.zeros_like(loss) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, loss)
    if dist.get_rank() == 0:
        print(f"losses {[round(t.item(), 3) for t in gathered]}", flush=True)


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    batch_size = 32 if rank < 2 else 24  # uneven shards: ranks 0-1 see 32, ranks 2-3 see 24
    samples_seen = 0
    grad = torch.zeros(8)
    for step in range(10):
        loss = torch.randn(1).abs()
        samples_seen += batch_size
        if should_log(samples_seen):
            log_metrics(loss)
        grad += torch.randn(8)
        dist.all_reduce(grad)
        if rank == 0:
            print(f"step {step} done", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
