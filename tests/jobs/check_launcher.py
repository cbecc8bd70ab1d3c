"""A user's own launcher for `mldebug check -- python check_launcher.py ...`: it starts
WORLD ranks of `python -m mldebug.preflight.rank` with torchrun's environment, and gets two
of them wrong as people do:

  --wrong-port RANK:PORT   that rank is given another MASTER_PORT than the others
  --cap RANK:CGROUP_DIR    once that rank has joined (its connect record is in its log),
                           its process goes into the cgroup (a CPU quota the test set):
                           it computes on a fraction of a core from then on
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
        while ranks[int(rank)].poll() is None:
            if log.exists() and '"phase":"connect"' in log.read_text(errors="replace"):
                Path(cgroup, "cgroup.procs").write_text(str(ranks[int(rank)].pid))
                print(f"launcher: rank {rank} capped by {cgroup}", flush=True)
                break
            time.sleep(0.05)
    for process in ranks:
        process.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
