"""Records real Flight Recorder dumps of small broken gloo jobs (CPU), for the tests.

    python tests/data/flight/record.py [OUT [SCENARIO...]]   (OUT defaults to this folder)

needs torch (recorded with 2.13.0+cpu). Each scenario starts 3 ranks of this same script
(gloo, 127.0.0.1, a free port), runs a few collectives, breaks one on purpose, and has
every rank write torch's own dump of its Flight Recorder DUMP_AFTER seconds after a first
barrier (a timer thread: gloo has no watchdog that would dump, and a rank waiting in a
collective holds no GIL), then exit. Into OUT/<scenario>/:
    comm_lib_trace_rank_<r>        the pickle of _dump_fr_trace()   (torch's default name)
    json/comm_lib_trace_rank_<r>   the JSON of _dump_fr_trace_json()

Scenarios (ranks 0-2; the default group, plus a group of ranks 0-1 in `behind`):
    skipped     at step 2, rank 2 skips the all_reduce and goes on to the broadcast
    size        at step 2, rank 2 all_reduces 5 floats where the others pass 4
    behind      rank 2 sleeps before step 3's all_reduce; ranks 0-1 wait in it
    rank0       at step 2, rank 0 (the one torch's analyser takes as the reference) all_reduces
                5 floats where ranks 1-2 pass 4
    p2p         each step rank 0 sends 4 floats to rank 1, which receives them; at step 2
                rank 1 does not receive (rank 0 waits in its send); rank 2 only all_reduces
    coalesced   each step all_reduce_coalesced of two tensors; at step 2 rank 2 calls a plain
                all_reduce instead
    alltoall    each step all_to_all_single of 3 floats; at step 2 rank 2 sends 6 and
                receives 3 (the members' totals differ)
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
SCENARIOS = ("skipped", "size", "behind", "rank0", "p2p", "coalesced", "alltoall")


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
        if scenario in ("p2p", "coalesced", "alltoall"):
            _other(scenario, rank, dist, torch)
        for step in range(1, 4):
            grad = torch.ones(4)
            if scenario == "rank0" and step == 2 and rank == 0:
                grad = torch.ones(5)
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


def _other(scenario: str, rank: int, dist, torch) -> None:
    """The p2p, coalesced and all_to_all scenarios: three steps, broken at step 2."""
    for step in range(1, 4):
        broken = step == 2
        if scenario == "p2p":
            data = torch.ones(4)
            if rank == 0:
                dist.send(data, dst=1)
            elif rank == 1 and not broken:
                dist.recv(data, src=0)
            dist.all_reduce(data)
        elif scenario == "coalesced":
            pair = [torch.ones(4), torch.ones(2)]
            if broken and rank == 2:
                dist.all_reduce(pair[0])
            else:
                dist.all_reduce_coalesced(pair)
        else:
            size = 6 if broken and rank == 2 else 3
            inputs, outputs = torch.ones(size), torch.zeros(3)
            dist.all_to_all_single(outputs, inputs)
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
    wanted = argv[1:] or SCENARIOS
    for scenario in wanted:
        record(scenario, root / scenario)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
