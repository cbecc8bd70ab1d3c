"""The gdb path (every thread, native frames) against `py-spy dump --native`, on one torch rank.

    python benchmarks/bench_gdb.py [--repeat 3]

Starts one torch process that made a gloo process group (world size 1: its gloo and
TCPStore threads run, as in a real rank) and sits in a sleep, then times, best of --repeat,
in one run:
  * mldebug's gdb read of the rank (`mldebug.collect.gdb.read_process`: `gdb --batch -nx`
    with mldebug's settings, `thread apply all bt` and, where CPython's gdb extension is
    found, `thread apply all py-bt`): every thread, Python or not;
  * plain `gdb --batch -p PID -ex "thread apply all bt"` (debuginfod off, nothing else):
    what the settings save;
  * `py-spy dump --native --pid PID`: the Python threads only, with their C frames;
  * `py-spy dump --pid PID`: the default path of `mldebug dump` (Python frames only).
It also prints gdb's peak memory (max RSS of the child) and how many threads each path saw.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from mldebug.collect import gdb as gdbs  # noqa: E402
from mldebug.model import RankTarget  # noqa: E402

BIN = Path(sys.executable).parent
RANK = textwrap.dedent(
    """\
    import os, time, torch, torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ["PORT"])
    dist.init_process_group("gloo", rank=0, world_size=1)
    dist.all_reduce(torch.ones(4))
    print("READY", flush=True)
    while True:
        time.sleep(0.5)
    """
)


def start_rank() -> subprocess.Popen:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-c", RANK],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, "PORT": str(port), "OMP_NUM_THREADS": "1"},
    )
    if proc.stdout.readline().strip() != "READY":
        raise SystemExit("the torch rank did not start")
    return proc


def best_of(repeat: int, run) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeat):
        started = time.perf_counter()
        result = run()
        best = min(best, time.perf_counter() - started)
    return best, result


def command(argv: list[str]):
    def run():
        done = subprocess.run(argv, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"{argv[:3]} failed: {done.stderr.strip()[:300]}")
        return done.stdout

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    gdb = gdbs.find_gdb()
    proc = start_rank()
    pid = proc.pid
    try:
        threads = len(os.listdir(f"/proc/{pid}/task"))
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        mine, dump = best_of(
            args.repeat, lambda: gdbs.read_process(gdb, RankTarget(pid=pid), timeout=300)
        )
        if dump.failure:
            raise SystemExit(f"gdb failed: {dump.failure_detail}")
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        plain, _ = best_of(
            args.repeat,
            command(
                [gdb, "--batch", "-p", str(pid), "-iex", "set debuginfod enabled off"]
                + ["-ex", "thread apply all bt"]
            ),
        )
        plain_peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        native, out = best_of(
            args.repeat,
            command([str(BIN / "py-spy"), "dump", "--native", "--json", "--pid", str(pid)]),
        )
        spy_threads = len(json.loads(out))
        python, _ = best_of(
            args.repeat, command([str(BIN / "py-spy"), "dump", "--json", "--pid", str(pid)])
        )
    finally:
        os.killpg(pid, signal.SIGKILL)
        proc.wait()
    names = sorted({t.name for t in dump.threads if not t.python_frames})
    print(f"one torch rank (gloo, world size 1): {threads} OS threads; best of {args.repeat}")
    print(
        f"  mldebug gdb read (every thread, py-bt {'on' if dump.python_bt else 'off'}): "
        f"{mine:6.2f} s  {len(dump.threads)} threads, native-only: {', '.join(names)}"
    )
    print(f"  plain gdb -batch 'thread apply all bt':      {plain:6.2f} s")
    print(
        f"  py-spy dump --native:                        {native:6.2f} s  {spy_threads} "
        "Python threads only"
    )
    print(f"  py-spy dump (mldebug dump's default path):   {python:6.2f} s")
    if peak > before:
        print(f"  gdb peak memory, mldebug's read:             {peak / 1024:6.0f} MiB")
    if plain_peak > peak:
        print(f"  gdb peak memory, plain gdb:                  {plain_peak / 1024:6.0f} MiB")
    print(f"  load average while measuring: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
