"""How soon is a change over time named, and how often does a healthy run raise one?

    python benchmarks/bench_change.py [--nproc 2] [--sizes 1.75 2.5 4 10] [--slow-from 100]
                                      [--healthy-seconds 120] [--sim-runs 200]

Prints, in one run:
  * real jobs (examples/slows_down.py under `mldebug run`, gloo on CPU): every rank's
    DataLoader gets slower from step --slow-from on (each size is its milliseconds a sample
    after, 1 before; 8 samples a batch). Once a second the ranks' state files are judged as
    `mldebug dump` and the console's check judge them (analysis/change.py): the step and
    the seconds after the change when it is first named (info, and warning) and when
    `mldebug run`'s console line came, and what it said;
  * a real healthy job for --healthy-seconds (an evaluation every 25 steps, a 1.5 s
    checkpoint pause every 40): the checks that named a change (false alarms);
  * the same on --sim-runs generated runs of 1,500 steps (jitter ±15%, warm-up, GC pauses,
    evaluations and checkpoints, fed through the real agent history and reader; "bursts":
    also 40 steps at 1.8x every 300, a busy neighbour now and then; "busier node": from the
    change on compute and collectives 1.8x as long, 85% of the growth the steps' run-queue
    delay, as a neighbour that starts midway makes it: a change mldebug says as info, never
    a warning), each judged at every block, beside the plain alternatives: the mean of the last 16 steps
    against the mean of the run so far, alarm at 1.3x (what a hand-written check of a
    throughput line does), and the same with medians.
    For slowdowns of each size: how many steps after the change each names it (median),
    and for healthy runs: the share of runs with any alarm.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's mldebug
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # testkit

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import tempfile
import time

from testkit.changekit import busier_node, healthy, history_section, slower, views_of

from mldebug.agent.step_history import StepHistory
from mldebug.analysis.change import CAUSE_NODE, WARN_RATIO, change_finding, rank_change
from mldebug.collect.agenttiming import parse_timing
from mldebug.files.rundir import RunPaths
from mldebug.launch.stragglers import read_views

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "slows_down.py"
MLDEBUG = [sys.executable, "-m", "mldebug"]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}


def start(folder: Path, name: str, nproc: int, args: list[str]) -> tuple[subprocess.Popen, Path]:
    run_dir = folder / name
    log = (folder / f"{name}.console").open("wb")
    proc = subprocess.Popen(
        [*MLDEBUG, "run", "--run-dir", str(run_dir), "--nproc-per-node", str(nproc),
         str(EXAMPLE), *args],
        stdout=subprocess.DEVNULL, stderr=log, env=ENV, start_new_session=True, cwd=folder,
    )  # fmt: skip
    return proc, run_dir


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def state(run_dir: Path, rank: int = 0) -> dict:
    try:
        return json.loads((run_dir / "ranks" / str(rank) / "state.json").read_text())
    except (OSError, ValueError):
        return {}


def change_time(run_dir: Path, slow_from: int) -> float | None:
    """When rank 0 began step `slow_from` (its history, else its window), its clock."""
    timing = parse_timing(state(run_dir).get("timing"))
    if timing is None:
        return None
    for step in timing.steps:
        if step.step == slow_from:
            return step.start
    for block in timing.history:
        if block.first <= slow_from < block.first + block.units:
            return block.start + (slow_from - block.first) * (block.end - block.start) / block.units
    return None


def real_size(folder: Path, nproc: int, slow_ms: float, slow_from: int, limit: float) -> dict:
    name = f"slow{slow_ms:g}"
    proc, run_dir = start(
        folder, name, nproc, ["--slow-from", str(slow_from), "--slow-data-ms", str(slow_ms)]
    )
    first: dict[str, tuple[int, float, str]] = {}
    paths = RunPaths(run_dir)
    deadline = time.monotonic() + limit
    log = folder / f"{name}.console"
    console_at = None
    try:
        while time.monotonic() < deadline:
            time.sleep(1)
            if console_at is None and "lasting change" in log.read_text(errors="replace"):
                console_at = (int(state(run_dir).get("step") or 0), time.time())
            if console_at is not None or (
                "warning" in first and time.time() - first["warning"][1] > 20
            ):
                break  # the console line came, or 20 s after the warning it did not
            finding = change_finding(read_views(paths))
            if finding is None:
                continue
            now_step = int(state(run_dir).get("step") or 0)
            for level in ("info", "warning"):
                if level not in first and (level == "info" or finding.severity == "warning"):
                    first[level] = (now_step, time.time(), finding.summary)
        began = change_time(run_dir, slow_from)
        reached = int(state(run_dir).get("step") or 0)
    finally:
        stop(proc)
    out: dict = {"slow_ms": slow_ms, "reached": reached}
    if console_at is not None:
        first["console"] = (*console_at, "")
    for level, (step, when, summary) in first.items():
        out[level] = (step - slow_from, None if began is None else when - began, summary)
    return out


def real_healthy(folder: Path, nproc: int, seconds: float) -> tuple[int, int, int, bool]:
    proc, run_dir = start(
        folder, "healthy", nproc,
        ["--eval-every", "25", "--eval-batches", "40", "--checkpoint-every", "40",
         "--checkpoint-seconds", "1.5"],
    )  # fmt: skip
    paths = RunPaths(run_dir)
    checks = alarms = 0
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            time.sleep(1)
            views = read_views(paths)
            if not views:
                continue
            checks += 1
            alarms += change_finding(views) is not None
        steps = int(state(run_dir).get("step") or 0)
    finally:
        stop(proc)
    said = "lasting change" in (folder / "healthy.console").read_text(errors="replace")
    return checks, alarms, steps, said


# ------------------------------------------------------------------ generated runs


def plain_alarms(walls: list[float], start: int) -> tuple[int | None, int | None]:
    """The first step from `start` on where a hand-written check fires: the mean of the last
    16 steps over 1.3x the mean of the run so far (what a throughput log line shows), and
    the same with medians."""
    total, mean_at, median_at = 0.0, None, None
    for i, wall in enumerate(walls):
        total += wall
        if i < max(start, 32):
            continue
        last = walls[i - 15 : i + 1]
        if mean_at is None and sum(last) / 16 > 1.3 * total / (i + 1):
            mean_at = i + 1
        if median_at is None and statistics.median(last) > 1.3 * statistics.median(walls[: i + 1]):
            median_at = i + 1
        if mean_at is not None and median_at is not None:
            break
    return mean_at, median_at


BURSTS = -1.0  # a healthy run on a busy node: short slow spells


def bursts(base):
    """A neighbour's burst now and then: 40 steps (about 1.5 s) at 1.8x every 300 steps."""

    def shape(step: int) -> tuple[float, float, float, float]:
        c, d, co, s = base(step)
        return (c * 1.8 if step % 300 >= 260 else c), d, co, s

    return shape


def sim_run(seed: int, extra: float, at: int, steps: int = 1500) -> tuple[int | None, ...]:
    """Steps after the change (a healthy run: after its start) at which mldebug, the plain
    mean check and the plain median check first fire; None: never. mldebug is judged at every
    block (as a rank's state is, once a second) from the change on (a healthy run: from its
    start)."""
    shape = healthy(random.Random(seed))
    if extra == BURSTS:
        shape, extra = bursts(shape), 0.0
    if extra:
        shape = slower(shape, at, "data", extra)
    base = at if extra else 0
    history, walls, now = StepHistory(), [], 1000.0
    found = None
    for step in range(1, steps + 1):
        compute, data, coll, sync = shape(step)
        wall = compute + data + coll + sync
        history.add_step(step, now, wall, coll, data, sync)
        walls.append(wall)
        now += wall
        if found is None and step % 4 == 0 and step >= base:
            timing = parse_timing({"version": 1, "history": history.rows()})
            if timing is not None and rank_change(0, timing.history) is not None:
                found = step
    mean_at, median_at = plain_alarms(walls, base)
    return tuple(None if x is None else x - base for x in (found, mean_at, median_at))


def simulated(runs: int, sizes: list[float], at: int) -> None:
    print(
        f"\ngenerated runs ({runs} each; 26 ms steps; slower from step {at}; healthy: "
        "1,500 steps with evaluations and checkpoints):"
    )
    print(f"{'extra data wait':>16} {'step ratio':>10} | {'mldebug: named, after':>26} | "
          f"{'plain mean: named, after':>26} | {'plain median: named, after':>26}")  # fmt: skip
    for extra in sizes:
        results = [sim_run(seed, extra, at) for seed in range(runs)]
        cells = []
        for way in range(3):
            fired = [r[way] for r in results if r[way] is not None]
            if extra <= 0:
                cells.append(f"false alarms {len(fired) / runs:>6.1%}")
            else:
                after = f"{statistics.median(fired):.0f} steps" if fired else "-"
                cells.append(f"{len(fired):>4}/{runs:<4} {after:>12}")
        ratio = "1.00x" if extra <= 0 else f"{(0.026 + extra) / 0.026:.2f}x"
        label = {0.0: "healthy", BURSTS: "healthy, bursts"}.get(extra, f"{extra * 1000:.0f} ms")
        print(f"{label:>16} {ratio:>10} | {cells[0]:>26} | {cells[1]:>26} | {cells[2]:>26}")


def busier_run(seed: int, at: int, steps: int = 1500) -> tuple[bool, bool, bool, bool]:
    """A 2-rank comm-heavy run whose node gets busier at `at`: did mldebug name it as a busier
    node (info), warn at any block since, and did the plain checks fire (on rank 0)?"""
    sections, walls = [], []
    for rank in range(2):
        rng = random.Random(seed * 100 + rank)
        base = healthy(rng, compute=0.02, collective=0.02, eval_every=0, ckpt_every=0)
        shape, delay = busier_node(base, at, 1.8, 0.85, rng)
        sections.append((shape, delay))
        if rank == 0:
            walls = [sum(shape(step)) for step in range(1, steps + 1)]
    named = warned = False
    for upto in range(at + 16, steps + 1, 64):  # a look every 64 steps since
        views = views_of([history_section(sh, upto, delay=de) for sh, de in sections])
        finding = change_finding(views)
        if finding is not None:
            warned = warned or finding.severity == "warning"
            named = named or dict(finding.facts).get("cause") == CAUSE_NODE
    mean_at, median_at = plain_alarms(walls, at)
    return named, warned, mean_at is not None, median_at is not None


def busier(runs: int, at: int) -> None:
    results = [busier_run(seed, at) for seed in range(runs)]
    counts = [sum(r[i] for r in results) for i in range(4)]
    print(
        f"\nbusier node ({runs} generated 2-rank runs; from step {at} compute and collectives "
        "1.8x, 85% of the growth run-queue delay; a look every 64 steps):\n"
        f"  mldebug: said 'busier node' in {counts[0]}/{runs}, a warning in {counts[1]}/{runs}"
        f" | plain mean: alarm in {counts[2]}/{runs} | plain median: alarm in {counts[3]}/{runs}"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--sizes", type=float, nargs="*", default=[1.75, 2.5, 4.0, 10.0])
    parser.add_argument("--slow-from", type=int, default=100)
    parser.add_argument("--limit", type=float, default=150.0, help="seconds a size may take")
    parser.add_argument("--healthy-seconds", type=float, default=120.0)
    parser.add_argument("--sim-runs", type=int, default=200)
    parser.add_argument("--skip-jobs", action="store_true", help="generated runs only")
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.1f}; {os.cpu_count()} cores")
    if not args.skip_jobs:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            print(f"\nreal jobs: {args.nproc} gloo ranks, data 1 ms a sample (8 a batch), "
                  f"10 ms of device wait a step, slower from step {args.slow_from}")  # fmt: skip
            print(f"{'after ms/sample':>15} | {'first named (info)':>26} | "
                  f"{f'warning (>= {WARN_RATIO:.1f}x)':>26} | {'console line':>26} | "
                  "what it said")  # fmt: skip
            for size in args.sizes:
                r = real_size(folder, args.nproc, size, args.slow_from, args.limit)
                cells = []
                for level in ("info", "warning", "console"):
                    if level in r:
                        steps, seconds, _ = r[level]
                        sec = "?" if seconds is None else f"{seconds:.1f} s"
                        cells.append(f"{steps:>4} steps, {sec:>8} after")
                    else:
                        cells.append(f"not named by step {r['reached']}")
                said = r.get("warning", r.get("info", (0, 0, "")))[2]
                print(f"{size:>15g} | {cells[0]:>26} | {cells[1]:>26} | {cells[2]:>26} | "
                      f"{said}")  # fmt: skip
            checks, alarms, steps, said = real_healthy(folder, args.nproc, args.healthy_seconds)
            print(f"\nhealthy job, {args.healthy_seconds:.0f} s ({steps} steps, an evaluation "
                  f"every 25 steps, a 1.5 s checkpoint every 40): {alarms} of {checks} checks "
                  f"named a change; console line: {'yes' if said else 'no'}")  # fmt: skip
    simulated(args.sim_runs, [0.0, BURSTS, 0.004, 0.008, 0.013, 0.026, 0.06], 610)
    busier(max(10, args.sim_runs // 4), 610)
    print(f"load average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
