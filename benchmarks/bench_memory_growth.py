"""How soon is a leak named, how often does a healthy job get a false alarm, and what does a
census of live tensors cost?

1. Detection time against leak rate: `tests/jobs/trust_jobs.py bare` (2 gloo ranks, no
   optimizer, rank 1 keeps each step's error with its graph) under `mldebug run`, with
   LEAK_BYTES of 50 KB, 150 KB and 1 MB a step. From the moment the ranks say READY,
   `mldebug dump --run --json` every DUMP_EVERY seconds until a memory_growth finding names
   rank 1. Beside it, the plain alternative: the per-step rule alone (analysis.memory.growth
   over state.json's memory_history, what dump had before), read at the same moments.
2. False alarms: `trust_jobs.py healthy` (DataLoader workers, AdamW, a 1.5 s checkpoint
   pause on rank 0 every 25 steps, a 12 s evaluation every 60 s, GC pauses, step-time
   jitter, warm-up allocation, the allocator growing and trimming) for --healthy-seconds
   under `mldebug run --hang-timeout 10 --on-hang stop`, start-up included, with a `dump`
   every DUMP_EVERY seconds: the warnings and errors in the dumps, whether the watchdog
   stopped the job, and beside it what a watchdog of silence alone would have done (each of
   its "not a hang" lines would have been a hang report, and a stop).
3. The census's time in a process holding 100k tensors (agent/census.py's `take`), beside
   the plain walk it is made of (gc.get_objects() and a type test, grouping nothing).

    python benchmarks/bench_memory_growth.py [--rates 50000,153600,1000000]
                                             [--healthy-seconds 180] [--skip-jobs]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JOBS = ROOT / "tests" / "jobs" / "trust_jobs.py"
DUMP_EVERY = 3.0
sys.path.insert(0, str(ROOT))


def _env(**extra: str) -> dict:
    path = os.environ.get("PYTHONPATH")
    return {
        **os.environ,
        "PYTHONPATH": f"{ROOT}:{path}" if path else str(ROOT),
        "NO_COLOR": "1",
        **extra,
    }


def _start(run_dir: Path, args: list[str], options=(), **env: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "mldebug", "run", "--run-dir", str(run_dir)]
    command += ["--nproc-per-node", "2", *options, str(JOBS), *args]
    return subprocess.Popen(
        command,
        env=_env(**env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _log(run_dir: Path, rank: int) -> str:
    path = run_dir / "ranks" / str(rank) / "stdout.log"
    return path.read_text() if path.exists() else ""


def _dump(run_dir: Path) -> tuple[int, dict]:
    done = subprocess.run(
        [sys.executable, "-m", "mldebug", "dump", "--run", str(run_dir), "--json"],
        capture_output=True,
        text=True,
        timeout=180,
        env=_env(),
    )
    try:
        return done.returncode, json.loads(done.stdout)
    except json.JSONDecodeError:
        return done.returncode, {"findings": []}


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def detection(rate: int, folder: Path, limit: float = 120.0) -> tuple[float | None, float | None]:
    """(seconds to the time-based finding, seconds to the per-step rule's) after READY."""
    from mldebug.analysis.memory import growth
    from mldebug.collect.agentstate import read_state

    run_dir = folder / f"leak-{rate}"
    proc = _start(run_dir, ["bare"], LEAK_BYTES=str(rate), TRAIN_S=str(limit + 30))
    found = steps_rule = None
    try:
        while "READY" not in _log(run_dir, 1):
            if proc.poll() is not None:
                raise SystemExit(f"the leak job ended early: {proc.stderr.read()[-2000:]}")
            time.sleep(0.5)
        ready = time.monotonic()
        while time.monotonic() - ready < limit and found is None:
            _code, report = _dump(run_dir)
            now = time.monotonic() - ready
            if any(f["kind"] == "memory_growth" and 1 in f["ranks"] for f in report["findings"]):
                found = now
            state = read_state(run_dir, 1)
            if steps_rule is None and state is not None and growth(state) is not None:
                steps_rule = now
            time.sleep(DUMP_EVERY)
    finally:
        _stop(proc)
    return found, steps_rule


def false_alarms(seconds: float, folder: Path) -> dict:
    run_dir = folder / "healthy"
    proc = _start(
        run_dir, ["healthy", str(seconds)], options=("--hang-timeout", "10", "--on-hang", "stop")
    )
    dumps = warnings = errors = 0
    said: list[str] = []
    try:
        while proc.poll() is None:
            if "READY" in _log(run_dir, 0) or (run_dir / "ranks").exists():
                _code, report = _dump(run_dir)
                dumps += 1
                for finding in report["findings"]:
                    if finding["severity"] in ("warning", "error"):
                        said.append(f"{finding['severity']}: {finding['summary']}")
                        warnings += finding["severity"] == "warning"
                        errors += finding["severity"] == "error"
            time.sleep(DUMP_EVERY)
        err = proc.stderr.read()
    finally:
        _stop(proc)
    lines = err.splitlines()
    return {
        "dumps": dumps,
        "warnings": warnings,
        "errors": errors,
        "findings": said,
        "exit": proc.returncode,
        "stopped": any("stopping the job" in line for line in lines),
        "not_a_hang": [line for line in lines if "not a hang" in line],
        "hangs": [line for line in lines if line.startswith("mldebug: no progress for")],
    }


def census_cost(count: int = 100_000) -> tuple[float, float, dict]:
    import torch

    from mldebug.agent.census import take

    kept = [torch.zeros(()) + i for i in range(count // 2)]
    kept += [torch.ones(4, 4) for _ in range(count - len(kept))]
    start = time.perf_counter()
    census = take(torch, budget=60.0)
    took = time.perf_counter() - start
    start = time.perf_counter()
    with warnings.catch_warnings():  # isinstance touches torch's deprecated module attributes
        warnings.simplefilter("ignore")
        plain = sum(1 for obj in gc.get_objects() if isinstance(obj, torch.Tensor))
    walk = time.perf_counter() - start
    assert plain >= count
    # What holds one of them (the lookup a census makes for each group that grew most).
    from mldebug.agent.holders import held_by

    objects = len(gc.get_objects())
    start = time.perf_counter()
    held = held_by(kept[-1], set(), time.monotonic() + 60)
    lookup = time.perf_counter() - start
    start = time.perf_counter()
    gc.get_referrers(kept[-1])
    bare = time.perf_counter() - start
    assert held and held[0]["items"] == count
    census["lookup"] = (objects, lookup, bare)
    # The moment the program is held: the grab of every object and the filter to tensors.
    from mldebug.agent.gcgrab import objects_of, subclasses

    start = time.perf_counter()
    objects_of(subclasses(torch.Tensor))
    census["held"] = time.perf_counter() - start
    del kept
    return took, walk, census


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="50000,153600,1000000")
    parser.add_argument("--healthy-seconds", type=float, default=180.0)
    parser.add_argument("--skip-jobs", action="store_true", help="the census figure only")
    args = parser.parse_args()
    took, walk, census = census_cost()
    print("census of a rank holding 100k tensors (agent/census.py):")
    print(f"  mldebug census (grouped, {len(census['groups'])} groups): {took * 1e3:.0f} ms")
    print(f"  plain walk (gc.get_objects + isinstance, no grouping): {walk * 1e3:.0f} ms")
    objects, lookup, bare = census["lookup"]
    print(f"what holds one of them (agent/holders.py), {objects:,} objects in the process:")
    print(f"  mldebug lookup (the container, then its variable): {lookup * 1e3:.0f} ms")
    print(f"  one bare gc.get_referrers: {bare * 1e3:.0f} ms")
    print(
        f"the program held up while a census takes the tensors from the collector "
        f"(agent/gcgrab.py), {objects:,} objects: {census['held'] * 1e3:.0f} ms"
    )
    if args.skip_jobs:
        return 0
    with tempfile.TemporaryDirectory(prefix="bench-memory-") as tmp:
        folder = Path(tmp)
        print("detection time after the ranks start training (2 gloo ranks, rank 1 leaks):")
        print(f"  {'leak a step':>12}  {'mldebug (by time)':>18}  {'per-step rule alone':>20}")
        for rate in (int(r) for r in args.rates.split(",")):
            found, steps_rule = detection(rate, folder)
            shown = [f"{v:.0f} s" if v is not None else "not in 120 s" for v in (found, steps_rule)]
            print(f"  {rate / 1000:>9.0f} KB  {shown[0]:>18}  {shown[1]:>20}", flush=True)
        result = false_alarms(args.healthy_seconds, folder)
        print(
            f"healthy job, {args.healthy_seconds:.0f} s under --hang-timeout 10 --on-hang stop, "
            f"a dump every {DUMP_EVERY:g} s:"
        )
        print(
            f"  mldebug: {result['dumps']} dumps, {result['warnings']} warnings, "
            f"{result['errors']} errors; watchdog hang reports: {len(result['hangs'])}; "
            f"stopped: {'yes' if result['stopped'] else 'no'} (exit {result['exit']})"
        )
        print(
            f"  a watchdog of silence alone: {len(result['not_a_hang'])} hang reports "
            f'(each "not a hang" line), the job stopped at the first'
        )
        for line in result["findings"][:10] + result["hangs"][:3]:
            print(f"    {line[:200]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
