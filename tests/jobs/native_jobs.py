"""Jobs for the gdb tests: a gloo job hung in its collectives, and a rank that aborts.

    mldebug run --nproc-per-node 2 tests/jobs/native_jobs.py hang
    mldebug run --nproc-per-node 2 --core-dumps tests/jobs/native_jobs.py abort

hang   rank 0 waits in all_reduce, rank 1 in a recv from rank 0 that never sends: both sit
       in a gloo collective for ever, gloo's own threads waiting beside them; with
       CORE_DIRS=1 each rank first moves into its own directory cores-rank<N>/ (a core
       pattern like `core` then keeps one core per rank)
abort  plain Python, no torch: rank 1 calls os.abort() (SIGABRT, a core file when cores
       are on) from a thread named "saver"; rank 0 sleeps until it is stopped

Every rank prints "READY <rank>" once it is in place.
"""

import os
import sys
import threading
import time

MODE = sys.argv[1] if len(sys.argv) > 1 else "hang"
RANK = int(os.environ["RANK"])


def ready():
    print(f"READY {RANK}", flush=True)


def hang():
    import torch
    import torch.distributed as dist

    if os.environ.get("CORE_DIRS"):
        os.makedirs(f"cores-rank{RANK}", exist_ok=True)
        os.chdir(f"cores-rank{RANK}")
    dist.init_process_group("gloo")
    tensor = torch.ones(4)
    ready()
    if RANK == 0:
        dist.all_reduce(tensor)  # ALL_REDUCE_LINE
    else:
        dist.recv(tensor, src=0)  # RECV_LINE


def save_checkpoint():
    time.sleep(0.5)
    os.abort()  # ABORT_LINE


def abort():
    ready()
    if RANK == 1:
        saver = threading.Thread(target=save_checkpoint, name="saver")
        saver.start()
        saver.join()
    while True:
        time.sleep(0.5)


if __name__ == "__main__":
    hang() if MODE == "hang" else abort()
