"""A launcher of plain Python "ranks" (no torch) that sit still, for tests and benchmarks.

    python sleepy_ranks.py N [--world W] [--workers] [--teardown]

Starts N child processes with RANK, LOCAL_RANK and WORLD_SIZE (W, default N) set, like
torchrun does. Each rank waits in `wait_for_peers()`; with --workers each rank also starts a
worker subprocess that inherits its environment, as a DataLoader worker does. With
--teardown a rank shuts its Python down at SIGUSR1 and then stays in its native teardown
(an exit handler of libc's that never returns, where torch's C++ teardown can take seconds):
alive, with no interpreter left to read. The launcher prints "READY <pid> <rank>" per rank
and waits for its children.
"""

import ctypes
import os
import signal
import subprocess
import sys
import time


def wait_for_peers():
    while True:
        time.sleep(0.5)  # WAIT_LINE


def stay_in_teardown() -> None:
    """At SIGUSR1, end Python normally; then libc runs pause() as an exit handler, for ever."""
    libc = ctypes.CDLL(None)
    libc.__cxa_atexit(libc.pause, None, None)
    signal.signal(signal.SIGUSR1, lambda *_: sys.exit(0))


def rank_main(with_worker: bool, teardown: bool) -> None:
    if teardown:
        stay_in_teardown()
    if with_worker:
        subprocess.Popen([sys.executable, __file__, "--worker"])
    os.write(
        1, f"READY {os.getpid()} {os.environ['RANK']}\n".encode()
    )  # one write: ranks share the pipe
    wait_for_peers()


def launch(count: int, world: int, options: list[str]) -> None:
    children = []
    for rank in range(count):
        env = {
            **os.environ,
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(world),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(20000 + os.getpid() % 10000),
        }
        args = [sys.executable, __file__, "--rank", *options]
        children.append(subprocess.Popen(args, env=env))
    for child in children:
        child.wait()


if __name__ == "__main__":
    argv = sys.argv[1:]
    if argv and argv[0] == "--worker":
        wait_for_peers()
    elif argv and argv[0] == "--rank":
        rank_main("--workers" in argv, "--teardown" in argv)
    else:
        n = int(argv[0]) if argv else 4
        world = int(argv[argv.index("--world") + 1]) if "--world" in argv else n
        launch(n, world, [o for o in ("--workers", "--teardown") if o in argv])
