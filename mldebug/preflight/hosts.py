"""`mldebug check --hosts`: start the rank program on every host over ssh, here.

    python -m mldebug.preflight.hosts SPEC_JSON

SPEC_JSON: {"hosts": [...], "nproc": N, "port": P, "ssh": [ssh argv before the host],
"remote": [the remote python argv], "env": {limits}}. Host i's local rank l is global rank
i*N + l, with torchrun's environment and the rendezvous on the first host. Every line a
rank writes comes back through its ssh session onto this process's output (the check's
launcher log), where the front end reads the records (preflight/wire.py): no filesystem needs to
be shared. Standard library only; it ends when every session has.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import threading

REMOTE_MODULE = "mldebug.preflight.rank"


def rank_command(spec: dict, host: str, index: int, local: int) -> list[str]:
    nproc, hosts = spec["nproc"], spec["hosts"]
    env = {
        "RANK": index * nproc + local,
        "LOCAL_RANK": local,
        "WORLD_SIZE": nproc * len(hosts),
        "LOCAL_WORLD_SIZE": nproc,
        "MASTER_ADDR": hosts[0],
        "MASTER_PORT": spec["port"],
        "OMP_NUM_THREADS": 1,
        **spec["env"],
    }
    words = ["env", *(f"{k}={v}" for k, v in env.items()), *spec["remote"], "-m", REMOTE_MODULE]
    # ssh hands the remote shell one string: quote each word for it.
    return [*spec["ssh"], host, shlex.join(words)]


def _relay(stream, label: str, lock: threading.Lock) -> None:
    for raw in stream:
        line = raw.decode("utf-8", errors="replace").rstrip("\n")
        with lock:
            # A record is left whole (the reader finds its marker after any prefix).
            print(f"[{label}] {line}", flush=True)


def main(argv: list[str]) -> int:
    spec = json.loads(argv[0])
    lock = threading.Lock()
    sessions, relays = [], []
    for index, host in enumerate(spec["hosts"]):
        for local in range(spec["nproc"]):
            label = f"{host}:{index * spec['nproc'] + local}"
            session = subprocess.Popen(
                rank_command(spec, host, index, local),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
            sessions.append(session)
            relay = threading.Thread(target=_relay, args=(session.stdout, label, lock))
            relay.start()
            relays.append(relay)
    for session in sessions:
        session.wait()
    for relay in relays:
        relay.join()
    failed = [s.returncode for s in sessions if s.returncode]
    if failed:
        print(f"mldebug check: {len(failed)} ssh session(s) failed: {failed[:8]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
