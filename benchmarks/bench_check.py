"""What does `mldebug check` cost beside the measurements it makes?

Runs, alternating, a few times each, on N gloo ranks of this machine:
  * `mldebug check --nproc-per-node N`: the launcher, the hooks in every rank, the
    results read back, judged, rendered and saved — what a user waits for;
  * plain: the same rank program (`python -m mldebug.preflight.rank`) started N times with
    torchrun's environment (OMP_NUM_THREADS=1 included) by a bare Popen loop, nothing read
    or judged afterwards.
Prints the median wall time of each and the difference (the check's machinery), plus what
judging the results costs on their own at 1,024 ranks (the analysis, from the lines).

    python benchmarks/bench_check.py [--nproc 4] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mldebug.analysis.check import check_verdict
from mldebug.collect.checklines import results_of
from mldebug.launch.env import free_port, rank_env
from mldebug.preflight import wire
from mldebug.report.check import render_text


def run_check(nproc: int, workdir: Path, index: int) -> tuple[float, float, float]:
    command = [sys.executable, "-m", "mldebug", "check", "--nproc-per-node", str(nproc)]
    command += ["--run-dir", str(workdir / f"check-{index}"), "--time-limit", "300"]
    at = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=400)
    took = time.perf_counter() - at
    if done.returncode not in (0, 1):
        raise SystemExit(f"mldebug check failed ({done.returncode}): {done.stderr[-2000:]}")
    report = json.loads((workdir / f"check-{index}" / "check.json").read_text())
    inside = max(r["seconds"] or 0.0 for r in report["ranks"])
    return took, inside, report["seconds_judging"]


def run_plain(nproc: int) -> tuple[float, float]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLDEBUG_")}
    env["OMP_NUM_THREADS"] = "1"  # as torchrun (and mldebug's launcher) give N ranks
    at = time.perf_counter()
    ranks = [
        subprocess.Popen(
            [sys.executable, "-m", "mldebug.preflight.rank"],
            env={**env, **rank_env(rank, nproc, "127.0.0.1", port, "plain")},
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        for rank in range(nproc)
    ]
    outputs = [process.communicate(timeout=400)[0] for process in ranks]
    took = time.perf_counter() - at
    results = results_of(line for output in outputs for line in output.splitlines())
    return took, max(r.seconds or 0.0 for r in results.ranks)


def judge_cost(world: int = 1024, per_node: int = 8) -> float:
    """Seconds to read `world` ranks' lines back and judge them (median of 5)."""
    rng = random.Random(1)
    lines = []
    for rank in range(world):
        host = f"node{rank // per_node:04d}"
        for record in (
            {"phase": "start", "world_size": world, "backend": "nccl", "gpu": True},
            {"phase": "connect", "ok": True, "step": "ring", "members": []},
            {"phase": "compute", "dtype": "bfloat16", "tflops": rng.uniform(650, 700)},
            {"phase": "end", "seconds": 40.0},
        ):
            lines.append(wire.encode({"rank": rank, "host": host, **record}))
    times = []
    for _ in range(5):
        at = time.perf_counter()
        render_text(check_verdict(results_of(lines)))
        times.append(time.perf_counter() - at)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    checks, plains = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for index in range(args.repeats):
            plains.append(run_plain(args.nproc))
            checks.append(run_check(args.nproc, Path(tmp), index))
    print(
        f"{args.nproc} gloo ranks on {os.cpu_count()} cores, {args.repeats} runs each, alternating"
    )
    print("                                   wall (median)   inside the ranks   wall - inside")
    rows = (
        ("mldebug check, whole command", [(w, i) for w, i, _ in checks]),
        ("plain rank programs (Popen)", plains),
    )
    for name, runs in rows:
        wall = statistics.median(w for w, _ in runs)
        inside = statistics.median(i for _, i in runs)
        print(f"{name:<34} {wall:8.1f} s {inside:14.1f} s {wall - inside:12.1f} s")
    extra = statistics.median(w - i for w, i in rows[0][1])
    extra -= statistics.median(w - i for w, i in plains)
    print(f"wall - inside, check minus plain (launcher, hooks, torch start-up): {extra:+.1f} s")
    judging = statistics.median(j for _, _, j in checks)
    print(f"after the ranks ended: reading, judging, rendering their results: {judging:.2f} s")
    print(f"reading and judging 1,024 ranks' results: {judge_cost() * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
