"""Records real Flight Recorder dumps of a slow gloo job and of a healthy one, for the tests.

    python tests/data/flight_timing/record.py [OUT]      (OUT defaults to this folder)

3 ranks of this same script (gloo, 127.0.0.1, a free port) make 40 all_reduces. In `slow`,
rank 2 works 30 ms before each, the others 10 ms; in `healthy`, every rank 10 ms ±10%.
After the loop each rank writes torch's pickle dump to OUT/<scenario>/comm_lib_trace_rank_<r>.
"""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
import time
from pathlib import Path

WORLD = 3
CALLS = 40


def rank_main(scenario: str, out: Path) -> None:
    import torch
    import torch.distributed as dist
    from torch._C._distributed_c10d import _dump_fr_trace

    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo")
    rng = random.Random(rank)
    tensor = torch.ones(4)
    for _ in range(CALLS):
        work = 0.03 if scenario == "slow" and rank == 2 else 0.01
        time.sleep(work * (1 + rng.uniform(-0.1, 0.1)))
        dist.all_reduce(tensor)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"comm_lib_trace_rank_{rank}").write_bytes(_dump_fr_trace())
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--rank":
        rank_main(sys.argv[2], Path(sys.argv[3]))
        return
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent
    for scenario in ("slow", "healthy"):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        procs = [
            subprocess.Popen(
                [sys.executable, __file__, "--rank", scenario, str(out / scenario)],
                env={
                    **os.environ,
                    "RANK": str(r),
                    "WORLD_SIZE": str(WORLD),
                    "MASTER_ADDR": "127.0.0.1",
                    "MASTER_PORT": str(port),
                },
            )  # fmt: skip
            for r in range(WORLD)
        ]
        for proc in procs:
            proc.wait(timeout=300)


if __name__ == "__main__":
    main()
