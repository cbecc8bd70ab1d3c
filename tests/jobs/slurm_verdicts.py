"""Three ranks, three behaviours a multi-node dump must judge as a local one does, for
`mldebug run --nproc-per-node 3` inside an sbatch script (tests/test_slurm_verdicts.py):

  * rank 1 keeps 1 MiB more at every step (a list that is never emptied): a leak;
  * rank 2 computes 1.6x as long as the others at every step: the straggler (three quarters
    of its compute a host wait, as a GPU rank's thread waits for its kernels: 3 ranks share
    the suite's cores, and each still uses its CPU between two readings, as a training rank
    does);
  * rank 0, once the file named by $PAUSE_FILE exists, writes a "checkpoint" for 1.5 s at
    every step while the others wait for it in all_reduce: a pause, not a hang.

It prints READY once it has stepped for READY_AFTER seconds (the memory timeline needs 20 s
of points after a 5 s warm-up), and runs until it is cancelled.
"""

import os
import time

import torch
import torch.distributed as dist

COMPUTE_S = 0.05
SLOW_FACTOR = 1.6
LEAK_BYTES = 1 << 20
PAUSE_S = 1.5
READY_AFTER = 32.0


def work(batch: torch.Tensor, seconds: float) -> None:
    time.sleep(seconds * 3 / 4)  # the host waits for its device's kernels
    end = time.perf_counter() + seconds / 4
    while time.perf_counter() < end:
        torch.mm(batch.T, batch)


def save_checkpoint() -> None:
    time.sleep(PAUSE_S)  # PAUSE_LINE


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = torch.nn.Linear(64, 64)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    kept = []
    compute = COMPUTE_S * (SLOW_FACTOR if rank == 2 else 1.0)
    pause_file = os.environ["PAUSE_FILE"]
    started, ready = time.monotonic(), False
    while True:
        batch = torch.randn(8, 64)
        work(batch, compute)
        loss = model(batch).pow(2).mean()
        loss.backward()
        grads = torch.cat([p.grad.flatten() for p in model.parameters()])
        dist.all_reduce(grads)
        optimizer.step()
        optimizer.zero_grad()
        if rank == 1:
            kept.append(torch.ones(LEAK_BYTES // 4))  # LEAK_LINE: never emptied
        if rank == 0 and os.path.exists(pause_file):
            save_checkpoint()
        if not ready and time.monotonic() - started > READY_AFTER:
            ready = True
            print(f"READY {rank}", flush=True)


if __name__ == "__main__":
    main()
