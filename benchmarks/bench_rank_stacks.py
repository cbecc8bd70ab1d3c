"""What does reading a rank's stacks from the rank itself (its agent's thread, on its abstract
socket: collect/rankstacks.py) cost, next to reading them with py-spy?

One rank under `mldebug run` (no torch: a Python loop with 8 threads, 20 frames deep each)
is read, in turn, `--reads` times each way from this process, with the same timer:
  * py-spy: `py-spy dump --json --pid PID` and its parsing (collect/pyspy.dump_stack);
  * rank: the checks, the connection, the thread's answer and the parsing
    (collect/rankstacks.ask_rank).
Reported: the median and the slowest read, and the threads and frames each read found.
Run as root (or with ptrace allowed) so that py-spy can read the rank too.

    python benchmarks/bench_rank_stacks.py [--reads 20]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mldebug.collect.pyspy import dump_stack, find_pyspy
from mldebug.collect.rankstacks import ask_rank
from mldebug.files.safeio import read_json
from mldebug.model import RankTarget

RANK = """\
import threading, time

def deep(n):
    if n == 0:
        while True:
            time.sleep(0.05)
    return deep(n - 1)

for i in range(7):
    threading.Thread(target=deep, args=(20,), daemon=True).start()
print("READY", flush=True)
deep(20)
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reads", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        script = Path(folder) / "rank.py"
        script.write_text(RANK)
        run_dir = Path(folder) / "run"
        job = subprocess.Popen(
            [sys.executable, "-m", "mldebug", "run", "--run-dir", str(run_dir)]
            + ["--nproc-per-node", "1", str(script)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "MLDEBUG_RUNS_DIR": folder},
            start_new_session=True,
        )
        try:
            info = None
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                info = read_json(run_dir / "ranks" / "0" / "proc.json")
                log = run_dir / "ranks" / "0" / "stdout.log"
                if info and log.exists() and "READY" in log.read_text():
                    break
                time.sleep(0.2)
            assert info, "the rank did not start"
            target = RankTarget(pid=info["pid"], rank=0, world_size=1, run_dir=str(run_dir))
            pyspy = find_pyspy()
            rows = []
            for name, read in (
                ("py-spy", lambda: dump_stack(pyspy, target, timeout=10)),
                ("rank (its agent)", lambda: ask_rank(target, "benchmark", timeout=10)),
            ):
                times, found = [], None
                for _ in range(args.reads):
                    started = time.perf_counter()
                    sample = read()
                    times.append(time.perf_counter() - started)
                    assert sample.failure is None, sample.failure_detail
                    found = sample
                assert found is not None
                frames = sum(len(t.frames) for t in found.threads)
                rows.append(
                    (name, statistics.median(times), max(times), len(found.threads), frames)
                )
        finally:
            os.killpg(job.pid, 15)
            job.wait(timeout=30)
    print(f"one rank, 8 threads, {args.reads} reads each way")
    print(f"{'reader':<22}{'median':>10}{'slowest':>10}{'threads':>9}{'frames':>8}")
    for name, median, slowest, threads, frames in rows:
        print(f"{name:<22}{median * 1000:>8.0f}ms{slowest * 1000:>8.0f}ms{threads:>9}{frames:>8}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
