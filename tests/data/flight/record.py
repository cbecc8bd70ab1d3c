"""Records real Flight Recorder dumps of small broken gloo jobs (CPU), for the tests.

    python tests/data/flight/record.py [OUT]      (OUT defaults to this script's folder)

needs torch (recorded with 2.13.0+cpu). Each scenario starts 3 ranks of this same script
(gloo, 127.0.0.1, a free port), runs a few collectives, breaks one on purpose, and has
every rank write torch's own dump of its Flight Recorder DUMP_AFTER seconds after a first
barrier (a timer thread: gloo has no watchdog that would dump, and a rank waiting in a
collective holds no GIL), then exit. Into OUT/<scenario>/:
    comm_lib_trace_rank_<r>        the pickle of _dump_fr_trace()   (torch's default name)
    json/comm_lib_trace_rank_<r>   the JSON of _dump_fr_trace_json()

Scenarios (ranks 0-2; the default group, plus a group of ranks 0-1 in `behind`):
    skipped   at step 2, rank 2 skips the all_reduce and goes on to the broadcast
    size      at step 2, rank 2 all_reduces 5 floats where the others pass 4
    behind    rank 2 sleeps before step 3's all_reduce; ranks 0-1 wait in it
"""

from __future__ import annotations

import datetime
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

WORLD = 3
DUMP_AFTER = 10.0  # seconds after the first barrier: every rank is in place by then
EXIT_AFTER = 5.0
SCENARIOS = ("skipped", "size", "behind")


def _dump_and_exit(out: Path, rank: int) -> None:
    from torch._C._distributed_c10d import _dump_fr_trace, _dump_fr_trace_json

    (out / "json").mkdir(parents=True, exist_ok=True)
    (out / f"comm_lib_trace_rank_{rank}").write_bytes(_dump_fr_trace())
    (out / "json" / f"comm_lib_trace_rank_{rank}").write_bytes(_dump_fr_trace_json())
    time.sleep(EXIT_AFTER)  # no rank leaves before all dumped: gloo would fail the others
    os._exit(0)


def rank_main(scenario: str, out: Path) -> None:
    import torch
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    pair = dist.new_group([0, 1]) if scenario == "behind" else None
    dist.barrier()
    threading.Timer(DUMP_AFTER, _dump_and_exit, (out, rank)).start()
    try:
        for step in range(1, 4):
            grad = torch.ones(4)
            if scenario == "size" and step == 2 and rank == 2:
                grad = torch.ones(5)
            if scenario == "behind" and step == 3 and rank == 2:
                time.sleep(3600)  # a slow data loader, a checkpoint: anything but the collective
            if not (scenario == "skipped" and step == 2 and rank == 2):
                dist.all_reduce(grad)
            dist.broadcast(grad, src=0)
            if pair is not None and rank in (0, 1):
                dist.all_reduce(grad, group=pair)
    except Exception as error:  # gloo may notice the mismatch: the dump still comes
        print(f"rank {rank}: {type(error).__name__}: {error}", file=sys.stderr)
    time.sleep(3600)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def record(scenario: str, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    env["WORLD_SIZE"] = str(WORLD)
    ranks = [
        subprocess.Popen(
            [sys.executable, __file__, "--rank", scenario, str(out)],
            env=dict(env, RANK=str(rank), LOCAL_RANK=str(rank)),
        )
        for rank in range(WORLD)
    ]
    codes = [p.wait(timeout=300) for p in ranks]
    print(f"{scenario}: exit codes {codes}, files {sorted(p.name for p in out.iterdir())}")


def main(argv: list[str]) -> int:
    if argv[:1] == ["--rank"]:
        rank_main(argv[1], Path(argv[2]))
        return 0
    root = Path(argv[0]) if argv else Path(__file__).resolve().parent
    for scenario in SCENARIOS:
        record(scenario, root / scenario)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
