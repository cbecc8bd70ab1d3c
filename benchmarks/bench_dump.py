"""`mldebug dump` on N local ranks against a plain sequential `py-spy dump` loop.

    python benchmarks/bench_dump.py [--ranks 8,32] [--repeat 3]

Starts N plain Python processes that carry rank environment and sit in a stack (no torch
needed, tests/jobs/sleepy_ranks.py), then times, best of --repeat:
  * `mldebug dump --pid LAUNCHER --json` as a user runs it: resolve the ranks, read each rank
    three times over ~0.8 s, merge, decide (the whole command, interpreter start included);
  * the same with --samples 1 (one reading, no stuck/running judgement);
  * a shell-style loop running `py-spy dump --pid` once per rank, one after the other: what a
    user does by hand today, and it gives N walls of frames and no verdict.
Target: 32 ranks dumped and diagnosed in under 2 s on a 2-core machine.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SLEEPY = ROOT / "tests" / "jobs" / "sleepy_ranks.py"
BIN = Path(sys.executable).parent


def start_ranks(count: int) -> tuple[subprocess.Popen, list[int]]:
    proc = subprocess.Popen(
        [sys.executable, str(SLEEPY), str(count)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    pids = [int(proc.stdout.readline().split()[1]) for _ in range(count)]
    return proc, pids


def timed(command: list[str], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True)
        elapsed = time.perf_counter() - started
        if done.returncode not in (0, 1):
            raise SystemExit(f"{command[:3]} failed: {done.stderr.strip()}")
        best = min(best, elapsed)
    return best


def timed_loop(pids: list[int], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        for pid in pids:
            subprocess.run(
                [str(BIN / "py-spy"), "dump", "--pid", str(pid)], capture_output=True, check=True
            )
        best = min(best, time.perf_counter() - started)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default="8,32")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    mldebug = [str(BIN / "mldebug"), "dump", "--json"]
    print(
        f"{'ranks':>5}  {'mldebug dump':>12}  {'--samples 1':>11}  {'py-spy loop':>11}"
        "   (seconds, best of %d; mldebug reads each rank 3x over 0.8 s)" % args.repeat
    )
    for count in (int(n) for n in args.ranks.split(",")):
        launcher, pids = start_ranks(count)
        try:
            time.sleep(0.5)
            full = timed([*mldebug, "--pid", str(launcher.pid)], args.repeat)
            single = timed([*mldebug, "--samples", "1", "--pid", str(launcher.pid)], args.repeat)
            loop = timed_loop(pids, args.repeat)
        finally:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.wait()
        print(f"{count:>5}  {full:>12.2f}  {single:>11.2f}  {loop:>11.2f}")


if __name__ == "__main__":
    main()
