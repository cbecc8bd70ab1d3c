"""Noisy output: lines written in pieces, a \\r progress bar, logging, C-level writes and
bytes that are not UTF-8, from every rank at once.

    mldebug run --nproc-per-node 2 examples/noisy_output.py

On the console every line carries its [host:rank] prefix and is whole; the progress bar
refreshes at most once a second per rank and ends with its final state. The raw bytes are
in <run>/ranks/<rank>/stdout.log and stderr.log.
"""

import logging
import os
import sys
import time

import torch
import torch.distributed as dist


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    log = logging.getLogger("train")

    for word in ("a", "line", "written", "in", "pieces"):
        sys.stdout.write(f"{word} ")
        sys.stdout.flush()
        time.sleep(0.05)
    sys.stdout.write(f"(rank {rank})\n")

    total = 40
    for i in range(total + 1):
        bar = "#" * (i * 20 // total)
        sys.stderr.write(f"\rprogress [{bar:<20}] {i}/{total}")
        sys.stderr.flush()
        time.sleep(0.05)
    sys.stderr.write("\n")

    log.info("logging works too, rank %d", rank)
    os.write(1, f"a C-level write to fd 1 from rank {rank}\n".encode())
    os.write(2, b"bytes that are not UTF-8: \xff\xfe\xfa end\n")

    tensor = torch.ones(4) * rank
    dist.all_reduce(tensor)
    print(f"all_reduce gave {tensor.tolist()}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
