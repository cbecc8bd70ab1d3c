"""How fast and how right are the slow-job findings, and what does the agent's timing cost?

    python benchmarks/bench_straggler.py [--nproc 4] [--healthy-seconds 180] [--factors ...]

Prints, in one run:
  * per slowdown factor (rank 1 computes 1.1x ... 2x as long as the others, ±10% step jitter
    on every rank, examples/straggler.py under `mldebug run`): how long after the first step
    `mldebug run` printed its straggler line, at which step, and whether it named rank 1
    (the agent); then `mldebug dump --profile 5` on the same job: what it named and how long
    it took (the sampling mode: it reads no agent file);
  * false alarms on a healthy job for --healthy-seconds (±10% jitter, a 1 s checkpoint pause
    on rank 0 every 25 steps, GC on): console lines, plus timing findings of a `dump` every
    15 s and of `dump --profile 5` now and then;
  * the agent's step-time cost with timing on vs off (MLDEBUG_TIMING=0), 1 rank doing a
    fixed amount of work a step (no waiting on others), runs alternated, medians compared;
    and the hooks' own cost per call, timed in this process.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's mldebug

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import tempfile
import time

from mldebug.launch.stragglers import read_views, slow_finding
from mldebug.rundir import RunPaths

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "straggler.py"
MLDEBUG = [sys.executable, "-m", "mldebug"]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
TIMING_KINDS = {"straggler", "input_bound", "comm_bound", "host_sync"}
SLOW_RANK = 1

FIXED_WORK = """\
import sys, time
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset

dist.init_process_group("gloo")
model = torch.nn.Linear(256, 256)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
loader = DataLoader(TensorDataset(torch.randn(4096, 256)), batch_size=32)
times = []
for epoch in range(int(sys.argv[1])):
    for (x,) in loader:
        start = time.perf_counter()
        for _ in range(int(sys.argv[2])):
            y = model(x)
        loss = y.pow(2).mean()
        loss.backward()
        dist.all_reduce(model.weight.grad)
        opt.step()
        opt.zero_grad()
        loss.item()
        times.append(time.perf_counter() - start)
times.sort()
print(f"MEDIAN_STEP {times[len(times) // 2]:.6f} STEPS {len(times)}", flush=True)
"""


def launch(folder: Path, name: str, nproc: int, args: list[str], env=None):
    run_dir = folder / name
    err = (folder / f"{name}.console").open("wb")
    proc = subprocess.Popen(
        [*MLDEBUG, "run", "--run-dir", str(run_dir), "--nproc-per-node", str(nproc),
         str(EXAMPLE), *args],
        stdout=subprocess.DEVNULL, stderr=err, env={**ENV, **(env or {})},
        start_new_session=True, cwd=folder,
    )  # fmt: skip
    return proc, run_dir, folder / f"{name}.console"


def stop(proc) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def wait_ready(run_dir: Path, nproc: int, proc, timeout: float = 300) -> float:
    deadline = time.monotonic() + timeout
    logs = [run_dir / "ranks" / str(r) / "stdout.log" for r in range(nproc)]
    while time.monotonic() < deadline:
        if all(p.exists() and "READY" in p.read_text(errors="replace") for p in logs):
            return time.monotonic()
        if proc.poll() is not None:
            raise SystemExit(f"the job {run_dir} ended early")
        time.sleep(0.2)
    raise SystemExit(f"the job {run_dir} never got ready")


def step_of(run_dir: Path, rank: int) -> int | None:
    try:
        return json.loads((run_dir / "ranks" / str(rank) / "state.json").read_text()).get("step")
    except (OSError, ValueError):
        return None


def said(console: Path) -> list[str]:
    text = console.read_text(errors="replace") if console.exists() else ""
    return [line for line in text.splitlines() if "silences this line" in line]


def dump(run_dir: Path, *options: str) -> tuple[dict, float]:
    started = time.monotonic()
    done = subprocess.run(
        [*MLDEBUG, "dump", "--run", str(run_dir), "--json", *options],
        capture_output=True, text=True, timeout=180, env=ENV,
    )  # fmt: skip
    return json.loads(done.stdout), time.monotonic() - started


def named(report: dict) -> list[tuple[str, list[int]]]:
    return [(f["kind"], f["ranks"]) for f in report["findings"] if f["kind"] in TIMING_KINDS]


def save_outputs(run_dir: Path, console: Path, save: Path) -> None:
    """What a user sees of this run: the console line, `dump`, `dump --profile 5` (docs)."""
    save.mkdir(parents=True, exist_ok=True)
    (save / "run_console.txt").write_text("\n".join(said(console)) + "\n")
    for name, options in (("dump.txt", ()), ("dump_profile.txt", ("--profile", "5"))):
        done = subprocess.run(
            [*MLDEBUG, "dump", "--run", str(run_dir), *options],
            capture_output=True, text=True, timeout=180, env={**ENV, "COLUMNS": "110"},
        )  # fmt: skip
        (save / name).write_text(done.stdout)


def factor_run(folder: Path, factor: float, nproc: int, limit: float, save=None) -> dict:
    args = ["--slow-rank", str(SLOW_RANK), "--factor", str(factor), "--jitter", "0.1",
            "--steps", "0"]  # fmt: skip
    proc, run_dir, console = launch(folder, f"x{factor}", nproc, args)
    try:
        ready = wait_ready(run_dir, nproc, proc)
        agent = {"seconds": None, "step": None, "named": None, "first_step": None}
        while time.monotonic() < ready + limit:
            if agent["first_step"] is None:
                finding = slow_finding(read_views(RunPaths(run_dir)))
                if finding is not None and finding.ranks == (SLOW_RANK,):
                    agent["first_step"] = step_of(run_dir, SLOW_RANK)
            lines = said(console)
            if lines:
                agent["seconds"] = time.monotonic() - ready
                agent["step"] = step_of(run_dir, SLOW_RANK)
                match = re.search(r"mldebug: ranks? ([0-9,\-]+)", lines[0])
                agent["named"] = match.group(1) if match else lines[0][:60]
                break
            time.sleep(0.25)
        report, took = dump(run_dir, "--profile", "5")
        if save is not None:
            save_outputs(run_dir, console, save)
        sampling = {"seconds": took, "named": named(report), "note": report["timing"]["note"]}
        return {"factor": factor, "agent": agent, "sampling": sampling}
    finally:
        stop(proc)


def healthy_run(folder: Path, nproc: int, seconds: float) -> dict:
    args = ["--factor", "1", "--jitter", "0.1", "--checkpoint-every", "25", "--steps", "0"]
    proc, run_dir, console = launch(folder, "healthy", nproc, args)
    alarms: list[str] = []
    dumps = profiles = 0
    try:
        ready = wait_ready(run_dir, nproc, proc)
        while time.monotonic() < ready + seconds:
            time.sleep(15)
            sampled = dumps % 4 == 3
            report, _ = dump(run_dir, *(("--profile", "5") if sampled else ()))
            dumps += 1
            profiles += sampled
            alarms += [f"dump: {k} {r}" for k, r in named(report)]
        steps = step_of(run_dir, 0)
        alarms += [f"console: {line[:100]}" for line in said(console)]
        return {"seconds": seconds, "dumps": dumps, "profiles": profiles, "steps": steps,
                "alarms": alarms}  # fmt: skip
    finally:
        stop(proc)


def overhead(folder: Path, repeats: int) -> dict:
    script = folder / "fixed_work.py"
    script.write_text(FIXED_WORK)
    medians: dict[str, list[float]] = {"on": [], "off": []}
    for index in range(repeats * 2):
        mode = "on" if index % 2 == 0 else "off"
        run_dir = folder / f"overhead{index}"
        done = subprocess.run(
            [*MLDEBUG, "run", "--run-dir", str(run_dir), "--nproc-per-node", "1", str(script),
             "2", "20"],
            capture_output=True, text=True, timeout=600, cwd=folder,
            env={**ENV, "MLDEBUG_TIMING": "1" if mode == "on" else "0"},
        )  # fmt: skip
        logs = (run_dir / "ranks" / "0" / "stdout.log").read_text(errors="replace")
        match = re.search(r"MEDIAN_STEP ([0-9.]+)", logs + done.stderr)
        if match:
            medians[mode].append(float(match.group(1)))
    on, off = statistics.median(medians["on"]), statistics.median(medians["off"])
    return {"on": on, "off": off, "runs": {k: len(v) for k, v in medians.items()}}


def hook_costs() -> dict:
    """The timing hooks' own cost per call, in this process (no torch needed)."""
    from mldebug import rankrules
    from mldebug.agent import collectives, timing

    part = timing.Timing(None, rankrules)
    group = collectives.Group("default_pg", 4)
    call = collectives.Call(group, 1, "all_reduce", None, 1.0, False, [], [], None)
    call.completed = 1.01
    n = 100_000

    def per_call(fn) -> float:
        best = float("inf")
        for _ in range(5):
            start = time.perf_counter()
            for _ in range(n):
                fn()
            best = min(best, (time.perf_counter() - start) / n)
        return best

    costs = {
        "collective_done": per_call(lambda: part.collective_done(call)),
        "data_waited": per_call(lambda: part.data_waited(part, 0.001, sys._getframe())),
        "on_step": per_call(lambda: part.on_step(1, 2.0)),
    }
    for _i in range(timing.MAX_CALLS):
        part.collective_done(call)
    start = time.perf_counter()
    for _ in range(100):
        json.dumps(part.section())
    costs["section_json_per_heartbeat"] = (time.perf_counter() - start) / 100
    return costs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nproc", type=int, default=4)
    parser.add_argument("--factors", type=float, nargs="*", default=[1.1, 1.2, 1.33, 1.5, 2.0])
    parser.add_argument("--limit", type=float, default=60.0, help="seconds to wait per factor")
    parser.add_argument("--healthy-seconds", type=float, default=180.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--save", type=Path, help="keep the 1.5x run's outputs here (docs)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-straggler-") as tmp:
        folder = Path(tmp)
        print(f"# {args.nproc} gloo ranks on {os.cpu_count()} CPUs; rank {SLOW_RANK} is slow; "
              "60 ms of compute a step, ±10% jitter on every rank", flush=True)  # fmt: skip
        print("factor | agent: mldebug run's line (mldebug dump)     | sampling (dump --profile 5)")
        for factor in args.factors:
            save = args.save if factor == 1.5 else None
            got = factor_run(folder, factor, args.nproc, args.limit, save)
            agent, sampling = got["agent"], got["sampling"]
            if agent["seconds"] is None:
                agent_text = f"not named within {args.limit:g} s"
            else:
                right = "right" if agent["named"] == str(SLOW_RANK) else f"WRONG ({agent['named']})"
                agent_text = (
                    f"{right}: {agent['seconds']:.1f} s, step {agent['step']} "
                    f"(dump names it at step {agent['first_step']})"
                )
            found = sampling["named"]
            if found:
                ok = found == [("straggler", [SLOW_RANK])] or found == [
                    ("input_bound", [SLOW_RANK])
                ]
                samp_text = f"{'right' if ok else 'WRONG'} {found} in {sampling['seconds']:.1f} s"
            else:
                samp_text = f"nobody named ({sampling['note']}) in {sampling['seconds']:.1f} s"
            print(f"{factor:>5}x | {agent_text:<44} | {samp_text}", flush=True)
        healthy = healthy_run(folder, args.nproc, args.healthy_seconds)
        print(
            f"healthy job, {healthy['seconds']:.0f} s ({healthy['steps']} steps; jitter ±10%, "
            f"1 s checkpoint pause on rank 0 every 25 steps, GC on): {len(healthy['alarms'])} "
            f"false alarms over the console and {healthy['dumps']} dumps "
            f"({healthy['profiles']} with --profile)",
            flush=True,
        )
        for alarm in healthy["alarms"]:
            print(f"  {alarm}")
        cost = overhead(folder, args.repeats)
        share = (cost["on"] - cost["off"]) / cost["off"] * 100
        print(
            f"agent step time, 1 rank, fixed work: timing on {cost['on'] * 1000:.2f} ms, "
            f"off (MLDEBUG_TIMING=0) {cost['off'] * 1000:.2f} ms: {share:+.1f}% "
            f"(medians of {cost['runs']['on']} and {cost['runs']['off']} alternated runs)",
            flush=True,
        )
        hooks = hook_costs()
        print(
            "timing hooks per call: "
            + ", ".join(f"{name} {seconds * 1e6:.1f} us" for name, seconds in hooks.items())
        )
        # examples/straggler.py's step: 2 collectives, 1 batch, 1 step count; one heartbeat
        # (a section encoded) a second.
        step = 0.060
        per_step = 2 * hooks["collective_done"] + hooks["data_waited"] + hooks["on_step"]
        per_step += hooks["section_json_per_heartbeat"] * step
        print(
            f"estimated from the hooks: {per_step * 1e6:.0f} us on a {step * 1000:.0f} ms step "
            f"with 2 collectives: {per_step / step * 100:.2f}% of the step"
        )


if __name__ == "__main__":
    main()
