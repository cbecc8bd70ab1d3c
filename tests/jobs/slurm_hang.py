"""A 4-task torch.distributed (gloo, CPU) job for SLURM that hangs: rank 1 never joins the
all_reduce the others wait in. Every task takes its rank and world size from SLURM's own
environment (SLURM_PROCID, SLURM_NTASKS), as a user's script under `srun` does.

    srun -n 4 python tests/jobs/slurm_hang.py     (MASTER_PORT set by the batch script)
"""

import os
import time

import torch
import torch.distributed as dist

RANK = int(os.environ["SLURM_PROCID"])
WORLD = int(os.environ["SLURM_NTASKS"])


def load_shard():
    print(f"READY {RANK}", flush=True)
    while True:
        time.sleep(0.5)  # CULPRIT_LINE


def main():
    address = f"tcp://127.0.0.1:{os.environ['MASTER_PORT']}"
    dist.init_process_group("gloo", init_method=address, rank=RANK, world_size=WORLD)
    if RANK == 1:
        load_shard()
    print(f"READY {RANK}", flush=True)
    dist.all_reduce(torch.ones(4))


if __name__ == "__main__":
    main()
