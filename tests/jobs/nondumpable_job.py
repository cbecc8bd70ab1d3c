"""A 4-rank torch.distributed (gloo, CPU) job whose ranks are non-dumpable, for the tests of
stacks read without ptrace.

    mldebug run --nproc-per-node 4 tests/jobs/nondumpable_job.py MODE

Each rank first makes itself non-dumpable (prctl PR_SET_DUMPABLE 0, as a setuid start or a
hardened runtime does): ptrace, py-spy and /proc/PID/environ are then refused to anyone
without CAP_SYS_PTRACE, the user who started it included.

MODE:
  stuck    rank 2 never reaches the all_reduce (it sits in load_shard); the others wait
  healthy  every rank trains in a loop (compute, all_reduce) until the file STOP exists in
           the working directory, then says DONE <rank> <steps> and exits 0

Every rank prints "READY <rank>" once it is in place.
"""

import ctypes
import os
import sys
import time

PR_SET_DUMPABLE = 4
ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

MODE = sys.argv[1] if len(sys.argv) > 1 else "stuck"
RANK = int(os.environ["RANK"])


def load_shard():
    print(f"READY {RANK}", flush=True)
    while True:
        time.sleep(0.5)  # STUCK_LINE


def train():
    steps = 0
    weights = torch.randn(64, 64)
    while True:
        grad = torch.ones(1) if os.path.exists("STOP") else torch.zeros(1)
        dist.all_reduce(grad)  # every rank stops at the same step
        if grad.item() > 0:
            break
        weights = torch.tanh(weights @ weights.T / 64)
        steps += 1
        if steps == 5:
            print(f"READY {RANK}", flush=True)
        time.sleep(0.01)
    print(f"DONE {RANK} {steps}", flush=True)


dist.init_process_group("gloo")
if MODE == "stuck" and RANK == 2:
    load_shard()
elif MODE == "stuck":
    print(f"READY {RANK}", flush=True)
    dist.all_reduce(torch.ones(1))  # WAIT_LINE
else:
    train()
    # No destroy_process_group(): on torch 2.4 a gloo rank may hang in it once its peer has
    # exited (seen without mldebug asking anything), and the test checks the exit code.
    sys.exit(0)
dist.destroy_process_group()
