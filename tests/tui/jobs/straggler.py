"""A gloo job (CPU) where the last rank never reaches the all_reduce: the others wait in it.

    torchrun --nproc-per-node 4 tests/tui/jobs/straggler.py

Each rank prints "IN PLACE <rank>" once it sits where it will stay.
"""

import os
import time

import torch
import torch.distributed as dist

RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])


def in_place():
    print(f"IN PLACE {RANK}", flush=True)


def prepare_batch():
    in_place()
    while True:
        time.sleep(0.2)  # CULPRIT_LINE


def average_gradients(grads):
    in_place()
    dist.all_reduce(grads)


def main():
    dist.init_process_group("gloo")
    grads = torch.ones(8)
    if RANK == WORLD - 1:
        prepare_batch()
    else:
        average_gradients(grads)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
