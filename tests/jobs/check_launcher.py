"""A user's own launcher for `mldebug check -- python check_launcher.py ...`: it starts
WORLD ranks of `python -m mldebug.preflight.rank` with torchrun's environment, and gets two
of them wrong as people do:

  --wrong-port RANK:PORT   that rank is given another MASTER_PORT than the others
  --cap RANK:CGROUP_DIR    once that rank has joined (its connect record is in its log),
                           its process goes into the cgroup (a CPU quota the test set):
                           it computes on a fraction of a core until its end record, then
                           it is set free (its interpreter's exit at a hundredth of a core
                           would take half a minute that tells nothing)
  --hosts A,B,...          rank i runs in a UTS namespace of its own named the i-th name
                           (`unshare --uts`, root): several "nodes" on this machine, as
                           containers on one host are, sharing its network

It waits for all ranks and exits 0, as a launcher whose ranks all exited 0 does.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("--world", type=int, default=4)
    parser.add_argument("--wrong-port")
    parser.add_argument("--cap")
    parser.add_argument("--hosts")
    args = parser.parse_args()
    wrong = dict([args.wrong_port.split(":")]) if args.wrong_port else {}
    ranks = []
    for rank in range(args.world):
        env = {
            **os.environ,
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(args.world),
            "LOCAL_WORLD_SIZE": str(args.world),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": wrong.get(str(rank), str(args.port)),
        }
        command = [sys.executable, "-m", "mldebug.preflight.rank"]
        if args.hosts:
            name = args.hosts.split(",")[rank]
            command = ["unshare", "--uts", "sh", "-c", f'hostname {name} && exec "$@"', "-"]
            command += [sys.executable, "-m", "mldebug.preflight.rank"]
        ranks.append(subprocess.Popen(command, env=env))
    if args.cap:
        rank, cgroup = args.cap.split(":", 1)
        log = Path(os.environ["MLDEBUG_RUN_DIR"], "ranks", rank, "stdout.log")
        capped = ranks[int(rank)]
        if _wait_for(capped, log, '"phase":"connect"'):
            Path(cgroup, "cgroup.procs").write_text(str(capped.pid))
            print(f"launcher: rank {rank} capped by {cgroup}", flush=True)
            if _wait_for(capped, log, '"phase":"end"'):
                Path(cgroup).parent.joinpath("cgroup.procs").write_text(str(capped.pid))
    for process in ranks:
        process.wait()
    return 0


def _wait_for(rank: subprocess.Popen, log: Path, record: str) -> bool:
    """Whether the rank printed the record while it ran."""
    while rank.poll() is None:
        if log.exists() and record in log.read_text(errors="replace"):
            return True
        time.sleep(0.05)
    return False


if __name__ == "__main__":
    sys.exit(main())
