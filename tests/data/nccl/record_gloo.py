"""Record what torch's gloo backend and TCPStore print when a job goes wrong, on CPU.

    python tests/data/nccl/record_gloo.py OUT

Each scenario starts real ranks (torch.distributed, gloo, 127.0.0.1) and keeps each rank's
stderr as `OUT/<scenario>/stderr.rank<R>.txt`, exactly as torch wrote it. The scenarios:

    size_mismatch   rank 1 all_reduces 2 floats where the others give 1
    recv_timeout    rank 2 skips an all_reduce and sleeps; the others time out (5 s)
    peer_closed     rank 1 exits before an all_reduce the others wait in
    barrier         rank 2 never reaches monitored_barrier (rank 0 reports it)
    store_clients   a world of 3 where only rank 0 starts: the store waits for clients
    store_refused   rank 1 of 2 starts alone: nothing listens at MASTER_ADDR:MASTER_PORT
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

WORLD = 3


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_main(scenario: str, rank: int, world: int) -> None:
    import torch
    import torch.distributed as dist

    timeout = timedelta(seconds=5 if scenario != "store_clients" else 6)
    if scenario == "store_refused":
        timeout = timedelta(seconds=4)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timeout)
    t = torch.ones(2 if (scenario == "size_mismatch" and rank == 1) else 1)
    dist.all_reduce(t)  # #1, everyone
    if scenario == "size_mismatch":
        dist.all_reduce(t)
    elif scenario == "recv_timeout":
        if rank == 2:
            time.sleep(12)
        else:
            dist.all_reduce(t)
    elif scenario == "peer_closed":
        if rank == 1:
            os._exit(0)
        time.sleep(1)
        dist.all_reduce(t)
    elif scenario == "barrier":
        if rank == 2:
            time.sleep(10)
        dist.monitored_barrier(timeout=timedelta(seconds=3))
    dist.destroy_process_group()


SCENARIOS = {
    "size_mismatch": range(WORLD),
    "recv_timeout": range(WORLD),
    "peer_closed": range(WORLD),
    "barrier": range(WORLD),
    "store_clients": [0],
    "store_refused": [1],
}


def main() -> int:
    if len(sys.argv) == 5 and sys.argv[1] == "--rank":
        rank_main(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
        return 0
    out = Path(sys.argv[1])
    procs = []
    for scenario, ranks in SCENARIOS.items():
        folder = out / scenario
        folder.mkdir(parents=True, exist_ok=True)
        port = free_port()
        world = 2 if scenario == "store_refused" else WORLD
        for rank in ranks:
            env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank))
            err = open(folder / f"stderr.rank{rank}.txt", "wb")
            procs.append(
                (
                    folder,
                    rank,
                    subprocess.Popen(
                        [sys.executable, __file__, "--rank", scenario, str(rank), str(world)],
                        env=env,
                        stdout=subprocess.DEVNULL,
                        stderr=err,
                    ),
                )
            )
    codes: dict[Path, dict[int, int]] = {}
    for folder, rank, proc in procs:
        try:
            codes.setdefault(folder, {})[rank] = proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            codes.setdefault(folder, {})[rank] = proc.wait()
    for folder, by_rank in codes.items():
        (folder / "exit_codes.txt").write_text(
            "".join(f"rank {r}: {c}\n" for r, c in sorted(by_rank.items()))
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
