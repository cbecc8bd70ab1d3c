"""A small torch.distributed (gloo, CPU) job that hangs in a chosen way, for mldebug's tests.

    torchrun --nproc-per-node 4 tests/jobs/hang_job.py MODE

MODE:
  straggler  rank 2 never reaches the all_reduce (it sits in load_shard)
  outliers   rank 1 blocks on a threading.Lock, rank 2 in a DataLoader __getitem__,
             with 5 ranks rank 3 is busy in C code holding the GIL; the others wait in
             all_reduce
  mismatch   ranks 0-1 call all_gather, ranks 2-3 call all_reduce
  missing    the last rank exits before init_process_group; the others wait for it
  healthy    every rank trains in a loop: compute, all_reduce, repeat (never hangs)
  dataloader every rank reads batches with DataLoader(num_workers=2); the last rank's
             dataset blocks in __getitem__ inside its worker processes, the others wait in
             all_reduce for it

Every rank prints "READY <rank>" once it is in place, so a test knows when to look.
"""

import os
import sys
import threading
import time

import torch
import torch.distributed as dist

MODE = sys.argv[1] if len(sys.argv) > 1 else "straggler"
RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])


def ready():
    print(f"READY {RANK}", flush=True)


def load_shard():
    ready()
    while True:
        time.sleep(0.5)  # STRAGGLER_LINE


def wait_for_lock():
    lock = threading.Lock()
    lock.acquire()  # held forever by this thread: the next acquire never returns
    ready()
    lock.acquire()  # LOCK_LINE


class StuckDataset(torch.utils.data.Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, index):
        ready()
        while True:
            time.sleep(0.5)  # GETITEM_LINE


def read_batches():
    loader = torch.utils.data.DataLoader(StuckDataset(), batch_size=2, num_workers=0)
    for batch in loader:
        return batch


class ShardDataset(torch.utils.data.Dataset):
    """This rank's items; on the last rank, reading an item never returns (dead storage)."""

    def __init__(self, blocked):
        self.blocked = blocked

    def __len__(self):
        return 8

    def __getitem__(self, index):
        if self.blocked and index == 0:
            ready()  # printed once, by the worker that got the first batch
        while self.blocked:
            time.sleep(0.5)  # WORKER_GETITEM_LINE
        return torch.full((4,), float(index))


def train_with_workers(tensor):
    dataset = ShardDataset(blocked=RANK == WORLD - 1)
    loader = torch.utils.data.DataLoader(dataset, batch_size=2, num_workers=2)
    for batch in loader:  # LOADER_LINE
        sync_gradients(tensor + batch.sum())


def crunch():
    ready()
    return sum(range(10**13))  # BUSY_LINE: one long C call that holds the GIL


def sync_gradients(tensor):
    ready()
    dist.all_reduce(tensor)  # ALL_REDUCE_LINE


def gather_metrics(tensor):
    ready()
    out = [torch.zeros_like(tensor) for _ in range(WORLD)]
    dist.all_gather(out, tensor)  # ALL_GATHER_LINE


def train_forever(tensor):
    weights = torch.randn(128, 128) / 16
    step = 0
    while True:
        for _ in range(20):
            weights = torch.tanh(weights @ weights)  # HEALTHY_LINE
        dist.all_reduce(tensor)
        if step == 0:
            ready()
        step += 1


def main():
    if MODE == "missing" and RANK == WORLD - 1:
        print(f"rank {RANK} leaves before init_process_group", flush=True)
        return
    if MODE == "missing":
        ready()
    dist.init_process_group("gloo")
    tensor = torch.ones(4)
    if MODE == "straggler":
        load_shard() if RANK == 2 else sync_gradients(tensor)
    elif MODE == "outliers":
        if RANK == 1:
            wait_for_lock()
        elif RANK == 2:
            read_batches()
        elif RANK == 3 and WORLD > 4:
            crunch()
        else:
            sync_gradients(tensor)
    elif MODE == "mismatch":
        gather_metrics(tensor) if RANK < 2 else sync_gradients(tensor)
    elif MODE == "healthy":
        train_forever(tensor)
    elif MODE == "dataloader":
        train_with_workers(tensor)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
