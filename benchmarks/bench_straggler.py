"""How fast and how right are the slow-job findings, and what does the agent's timing cost?

    python benchmarks/bench_straggler.py [--nproc 4] [--healthy-seconds 180] [--factors ...]
    python benchmarks/bench_straggler.py --cost-only [--pairs 2]   # the timing's cost alone
    python benchmarks/bench_straggler.py --stability [--runs 5] [--nprocs 2 4] [--watch 40]
        [--busy N]

With --stability, prints instead, per rank count and slowdown factor, over --runs runs each:
when the ranks' files first name rank 1 (seconds after the first step, and its step), and the
share of the looks after that which still name it (what `mldebug dump` and the console's
check judge: the agents' state files, analysis/timing.py), with the run's blocks
(analysis/timing_hold.py) beside the 64-step window alone (the blocks left out: the plain
alternative, what `dump` judged before); and a healthy job's looks with a warning (its
comm-heavy variant included: half its step in an all_reduce). A look every --every seconds.
With --busy N, N processes that work in 4 ms bursts (another user's work on the node, as in
tests/test_straggler_jobs.py) run beside every job, from before it starts until it ends.

Prints, in one run:
  * per slowdown factor (rank 1 computes 1.1x ... 2x as long as the others, ±10% step jitter
    on every rank, examples/straggler.py under `mldebug run`): the step of rank 1 at which
    the ranks' state files first name a straggler (what `mldebug dump` says), and when
    `mldebug run` printed its straggler line (step, seconds after the first step), and
    whether they named rank 1 (the agent); then `mldebug dump --profile 5` on the same job: what it named and how long
    it took (the sampling mode: it reads no agent file);
  * false alarms on a healthy job for --healthy-seconds (±10% jitter, a 1 s checkpoint pause
    on rank 0 every 25 steps, GC on): console lines, plus timing findings of a `dump` every
    15 s and of `dump --profile 5` now and then;
  * a DDP job (its all-reduces are C++): when the agent names rank 1 from torch's Flight
    Recorder;
  * the agent's step-time cost, 2 ranks doing a fixed amount of work a step, with
    dist.all_reduce and with DDP (the Flight Recorder reads): in one job whose agents switch
    their timing off and on every 16 steps (medians of each, and each block against the
    next: the mean difference with its 95% interval), and across runs with the
    agent's timing on vs off (MLDEBUG_TIMING=0), runs alternated, medians compared; and the
    hooks' own cost per call, timed in this process.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's mldebug
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # testkit

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import tempfile
import time
from dataclasses import replace

from testkit.procs import bursty_neighbours

from mldebug.analysis.timing import judge_timing
from mldebug.files.rundir import RunPaths
from mldebug.launch.stragglers import read_views, slow_finding

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "straggler.py"
MLDEBUG = [sys.executable, "-m", "mldebug"]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
TIMING_KINDS = {"straggler", "input_bound", "comm_bound", "host_sync"}
SLOW_RANK = 1
# The healthy job's communication-heavy variant (as tests/test_straggler_jobs.py's): 10 ms of
# compute, a 16 MiB all_reduce a step, and batches of 4 ms. With the default 16 ms batches
# beside 10 ms of compute its ranks wait for data about a quarter of each step, step after
# step: input-bound, which `dump` rightly says, not a healthy job.
COMM_HEAVY = ["--compute-ms", "10", "--comm-kb", "16384", "--data-ms", "0.5"]

FIXED_WORK = """\
import sys, time
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset

dist.init_process_group("gloo")
ddp = sys.argv[3] == "ddp"
model = torch.nn.Linear(256, 256)
if ddp:
    model = torch.nn.parallel.DistributedDataParallel(model)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
loader = DataLoader(TensorDataset(torch.randn(4096, 256)), batch_size=32)
# With "toggle": the agent's timing is switched off and on every 16 steps in this process
# (the same job, the same moments of the machine's load): each block's steps timed apart.
agent = sys.modules.get("_mldebug_agent")
timing = getattr(getattr(agent, "_runtime", None), "timing", None) if len(sys.argv) > 4 else None
times, blocks = [], {True: [], False: []}
for epoch in range(int(sys.argv[1])):
    for (x,) in loader:
        on = (len(times) // 16) % 2 == 0
        if timing is not None:
            timing.off = not on
        start = time.perf_counter()
        for _ in range(int(sys.argv[2])):
            y = model(x)
        loss = y.pow(2).mean()
        loss.backward()
        if not ddp:
            dist.all_reduce(model.weight.grad)
        opt.step()
        opt.zero_grad()
        loss.item()
        times.append(time.perf_counter() - start)
        blocks[on].append(times[-1])
if timing is not None:
    timing.off = False
    on, off = (sorted(blocks[k])[len(blocks[k]) // 2] for k in (True, False))
    print(f"TOGGLED_ON {on:.6f} TOGGLED_OFF {off:.6f} STEPS {len(times)}", flush=True)
    # Each block (on) against the next (off): the machine's load drifts less within a pair
    # than over the run; the mean of the pairs' differences and its standard error.
    medians = [sorted(times[i : i + 16])[8] for i in range(0, len(times) - 15, 16)]
    diffs = [(medians[i] - medians[i + 1]) / medians[i + 1] for i in range(0, len(medians) - 1, 2)]
    mean = sum(diffs) / len(diffs)
    se = (sum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1) / len(diffs)) ** 0.5
    print(f"TOGGLED_PAIRS {mean:.6f} SE {se:.6f} N {len(diffs)}", flush=True)
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


def factor_run(
    folder: Path, factor: float, nproc: int, limit: float, save=None, ddp: bool = False
) -> dict:
    args = ["--slow-rank", str(SLOW_RANK), "--factor", str(factor), "--jitter", "0.1",
            "--steps", "0", *(["--ddp"] if ddp else [])]  # fmt: skip
    proc, run_dir, console = launch(folder, f"x{factor}{'ddp' if ddp else ''}", nproc, args)
    try:
        ready = wait_ready(run_dir, nproc, proc)
        agent = {"seconds": None, "step": None, "named": None, "first_step": None,
                 "first_named": None}  # fmt: skip
        while time.monotonic() < ready + limit:
            if agent["first_step"] is None:
                finding = slow_finding(read_views(RunPaths(run_dir)))
                if finding is not None:
                    agent["first_step"] = step_of(run_dir, SLOW_RANK)
                    agent["first_named"] = finding.ranks
            lines = said(console)
            if lines:
                agent["seconds"] = time.monotonic() - ready
                agent["step"] = step_of(run_dir, SLOW_RANK)
                match = re.search(r"mldebug: ranks? ([0-9,\-]+)", lines[0])
                agent["named"] = match.group(1) if match else lines[0][:60]
                break
            time.sleep(0.25)
        if ddp:
            return {"factor": factor, "agent": agent, "sampling": None}
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


def overhead(folder: Path, pairs: int, mode: str, nproc: int = 2) -> dict:
    """Step time of the same job under `mldebug run` with the agent's timing on and off
    (MLDEBUG_TIMING=0: the agent without its timing), runs alternated, `pairs` of each."""
    script = folder / "fixed_work.py"
    script.write_text(FIXED_WORK)
    medians: dict[str, list[float]] = {"on": [], "off": []}
    for index in range(pairs * 2):
        on = index % 2 == (index // 2) % 2  # on, off, off, on, on, off...: no drift bias
        run_dir = folder / f"overhead-{mode}{index}"
        done = subprocess.run(
            [*MLDEBUG, "run", "--run-dir", str(run_dir), "--nproc-per-node", str(nproc),
             str(script), "6", "10", mode],
            capture_output=True, text=True, timeout=900, cwd=folder,
            env={**ENV, "MLDEBUG_TIMING": "1" if on else "0"},
        )  # fmt: skip
        logs = (run_dir / "ranks" / "0" / "stdout.log").read_text(errors="replace")
        match = re.search(r"MEDIAN_STEP ([0-9.]+)", logs + done.stderr)
        if match:
            medians["on" if on else "off"].append(float(match.group(1)))
        if mode == "ddp" and on:
            reads = flight_reads(run_dir)
            medians.setdefault("reads", []).append(reads)
    on, off = statistics.median(medians["on"]), statistics.median(medians["off"])
    paired = sorted((a - b) / b * 100 for a, b in zip(medians["on"], medians["off"], strict=False))
    return {"on": on, "off": off, "paired": paired, "reads": medians.get("reads"),
            "runs": {k: len(medians[k]) for k in ("on", "off")}}  # fmt: skip


def toggled(folder: Path, mode: str, nproc: int = 2) -> dict:
    """One job whose agents switch their timing off and on every 16 steps: medians of the
    steps with it on and with it off (the wrappers stay, inert: their check is timed apart)."""
    script = folder / "fixed_work.py"
    script.write_text(FIXED_WORK)
    run_dir = folder / f"toggled-{mode}"
    done = subprocess.run(
        [*MLDEBUG, "run", "--run-dir", str(run_dir), "--nproc-per-node", str(nproc),
         str(script), "8", "10", mode, "toggle"],
        capture_output=True, text=True, timeout=900, cwd=folder, env=ENV,
    )  # fmt: skip
    found = {}
    for rank in range(nproc):
        logs = (run_dir / "ranks" / str(rank) / "stdout.log").read_text(errors="replace")
        match = re.search(r"TOGGLED_ON ([0-9.]+) TOGGLED_OFF ([0-9.]+)", logs + done.stderr)
        used = re.search(r"TOGGLED_PAIRS ([-0-9.e]+) SE ([0-9.e]+) N", logs)
        if match and used:
            found[rank] = tuple(float(m.group(i)) for m in (match, used) for i in (1, 2))
    return {"ranks": found, "reads": flight_reads(run_dir) if mode == "ddp" else None}


def flight_reads(run_dir: Path) -> int:
    """Whether rank 0's agent held Flight Recorder rows at its end (DDP: it read the ring)."""
    try:
        state = json.loads((run_dir / "ranks" / "0" / "state.json").read_text())
    except (OSError, ValueError):
        return 0
    return len((state.get("timing") or {}).get("flight") or [])


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
        # read twice around each batch (the data wait's run-queue delay, agent/runqueue.py)
        "run_queue_read": per_call(part.delay.seconds),
    }
    for _i in range(timing.MAX_CALLS):
        part.collective_done(call)
    start = time.perf_counter()
    for _ in range(100):
        json.dumps(part.section())
    costs["section_json_per_heartbeat"] = (time.perf_counter() - start) / 100
    return costs


def agent_text(agent: dict, limit: float) -> str:
    first = agent["first_step"]
    if first is not None and agent["first_named"] != (SLOW_RANK,):
        return f"WRONG: dump named {agent['first_named']} at step {first}"
    dumped = f"dump names it at step {first}" if first is not None else "dump never named it"
    if agent["seconds"] is None:
        return f"{dumped}; no console line within {limit:g} s"
    right = "right" if agent["named"] == str(SLOW_RANK) else f"WRONG ({agent['named']})"
    return f"{right}: {dumped}; console line at step {agent['step']}, {agent['seconds']:.1f} s"


def _windows_only(views: list) -> list:
    """The views with the run's blocks left out: the 64-step window alone."""
    bare = []
    for view in views:
        timing = view.agent.timing if view.agent is not None else None
        if timing is not None:
            view = replace(view, agent=replace(view.agent, timing=replace(timing, blocks=())))
        bare.append(view)
    return bare


def _names(views: list) -> tuple[int, ...] | None:
    found = slow_finding(views)
    return found.ranks if found is not None else None


def _warned(views: list) -> list[str]:
    return [
        f"{f.kind} {f.ranks}"
        for f in judge_timing(views).findings
        if f.severity in ("warning", "error")
    ]


def watch_run(folder: Path, name: str, nproc: int, args: list[str], watch: float,
              every: float) -> dict:  # fmt: skip
    """One job under `mldebug run`, looked at every `every` s for `watch` s after its first
    step: per look, what the blocks and the window alone name, and any warning."""
    proc, run_dir, _ = launch(folder, name, nproc, args)
    looks = []
    try:
        ready = wait_ready(run_dir, nproc, proc)
        while time.monotonic() < ready + watch:
            time.sleep(every)
            views = read_views(RunPaths(run_dir))
            bare = _windows_only(views)
            looks.append({
                "t": time.monotonic() - ready, "step": step_of(run_dir, SLOW_RANK),
                "held": _names(views), "window": _names(bare),
                "warned": _warned(views), "warned_window": _warned(bare),
            })  # fmt: skip
        return {"looks": looks}
    finally:
        stop(proc)


def stability(looks: list[dict], key: str) -> tuple[float | None, int | None, float | None, int]:
    """(seconds, step) of the first look naming rank 1, the share of the later looks that
    still name it, and the looks naming another rank."""
    first = next((i for i, look in enumerate(looks) if look[key] == (SLOW_RANK,)), None)
    wrong = sum(1 for look in looks if look[key] not in (None, (SLOW_RANK,)))
    if first is None:
        return None, None, None, wrong
    after = looks[first + 1 :]
    share = sum(look[key] == (SLOW_RANK,) for look in after) / len(after) if after else None
    return looks[first]["t"], looks[first]["step"], share, wrong


def _spread(values: list[float], fmt: str) -> str:
    if not values:
        return "-"
    values = sorted(values)
    return f"{format(statistics.median(values), fmt)} ({format(values[0], fmt)}-{format(values[-1], fmt)})"


def stability_main(args: argparse.Namespace, folder: Path) -> None:
    print(f"# {os.cpu_count()} CPUs; rank {SLOW_RANK} computes FACTOR x as long, 60 ms of "
          f"compute a step, ±10% jitter on every rank; a look every {args.every:g} s for "
          f"{args.watch:g} s after the first step; {args.runs} runs each; "
          f"{args.busy} bursty processes beside the job", flush=True)  # fmt: skip
    with bursty_neighbours(args.busy):
        _stability(args, folder)


def _stability(args: argparse.Namespace, folder: Path) -> None:
    print(
        "ranks | factor | named in | first named: s after 1st step, step (median, range) | "
        "stability after: blocks (mean, min) | window alone (mean, min) | wrong names"
    )
    for nproc in args.nprocs:
        for factor in args.factors:
            results = []
            for run in range(args.runs):
                job = ["--slow-rank", str(SLOW_RANK), "--factor", str(factor), "--jitter",
                       "0.1", "--steps", "0"]  # fmt: skip
                results.append(watch_run(folder, f"s{nproc}-{factor}-{run}", nproc, job,
                                         args.watch, args.every))  # fmt: skip
            held = [stability(r["looks"], "held") for r in results]
            window = [stability(r["looks"], "window") for r in results]
            named = [h for h in held if h[0] is not None]
            shares = [h[2] for h in held if h[2] is not None]
            plain = [w[2] for w in window if w[2] is not None]
            print(
                f"{nproc} | {factor:g}x | {len(named)}/{len(held)} | "
                f"{_spread([h[0] for h in named], '.0f')} s, step "
                f"{_spread([float(h[1] or 0) for h in named], '.0f')} | "
                f"{_mean_min(shares)} | {_mean_min(plain)} | "
                f"{sum(h[3] for h in held)} (window alone {sum(w[3] for w in window)})",
                flush=True,
            )
        healthy = []
        for run in range(args.runs):
            job = ["--factor", "1", "--jitter", "0.1", "--checkpoint-every", "25", "--steps",
                   "0", *(COMM_HEAVY if run % 2 else [])]  # fmt: skip
            healthy.append(watch_run(folder, f"h{nproc}-{run}", nproc, job, args.watch,
                                     args.every))  # fmt: skip
        looks = [look for r in healthy for look in r["looks"]]
        alarms = sum(bool(look["warned"]) for look in looks)
        plain = sum(bool(look["warned_window"]) for look in looks)
        print(
            f"{nproc} | healthy | {args.runs} runs ({(args.runs) // 2} comm-heavy), "
            f"{len(looks)} looks: {alarms} with a warning (window alone: {plain})",
            flush=True,
        )
        for look in looks:
            if look["warned"]:
                print(f"    at {look['t']:.0f} s: {look['warned']}")


def _mean_min(shares: list[float]) -> str:
    if not shares:
        return "-"
    return f"{statistics.mean(shares) * 100:.0f}%, {min(shares) * 100:.0f}%"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nproc", type=int, default=4)
    parser.add_argument("--factors", type=float, nargs="*", default=[1.1, 1.2, 1.33, 1.5, 2.0])
    parser.add_argument("--limit", type=float, default=60.0, help="seconds to wait per factor")
    parser.add_argument("--healthy-seconds", type=float, default=180.0)
    parser.add_argument("--pairs", type=int, default=2, help="on/off run pairs for the cost")
    parser.add_argument("--save", type=Path, help="keep the 1.5x run's outputs here (docs)")
    parser.add_argument("--cost-only", action="store_true", help="the timing's cost alone")
    parser.add_argument("--stability", action="store_true", help="detection and stability")
    parser.add_argument("--runs", type=int, default=5, help="--stability: runs per case")
    parser.add_argument("--nprocs", type=int, nargs="*", default=[2, 4])
    parser.add_argument("--watch", type=float, default=40.0, help="--stability: seconds")
    parser.add_argument("--every", type=float, default=2.0, help="--stability: look every")
    parser.add_argument("--busy", type=int, default=0, help="--stability: bursty neighbours")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-straggler-") as tmp:
        folder = Path(tmp)
        if args.stability:
            stability_main(args, folder)
            return
        print(f"# {args.nproc} gloo ranks on {os.cpu_count()} CPUs; rank {SLOW_RANK} is slow; "
              "60 ms of compute a step, ±10% jitter on every rank", flush=True)  # fmt: skip
        print("factor | agent: first named by dump; mldebug run's console line | "
              "sampling (dump --profile 5)")  # fmt: skip
        for factor in [] if args.cost_only else args.factors:
            save = args.save if factor == 1.5 else None
            got = factor_run(folder, factor, args.nproc, args.limit, save)
            sampling = got["sampling"]
            found = sampling["named"]
            if found:
                ok = found in ([("straggler", [SLOW_RANK])], [("input_bound", [SLOW_RANK])])
                samp_text = f"{'right' if ok else 'WRONG'} {found} in {sampling['seconds']:.1f} s"
            else:
                samp_text = f"nobody named ({sampling['note']}) in {sampling['seconds']:.1f} s"
            text = agent_text(got["agent"], args.limit)
            print(f"{factor:>5}x | {text:<62} | {samp_text}", flush=True)
        if not args.cost_only:
            ddp = factor_run(folder, 1.5, args.nproc, 90.0, ddp=True)
            print(f" 1.5x DDP | {agent_text(ddp['agent'], 90.0)} (Flight Recorder rows, read every "
                  "10 s)", flush=True)  # fmt: skip
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
        for mode, words in (("python", "dist.all_reduce + DataLoader"), ("ddp", "DDP")):
            got = toggled(folder, mode)
            for rank, (on, off, paired, se) in sorted(got["ranks"].items()):
                reads = (
                    f"; it held {got['reads']} Flight Recorder rows"
                    if got["reads"] and rank == 0
                    else ""
                )
                print(
                    f"agent step time, same job ({words}), rank {rank}: timing on "
                    f"{on * 1000:.2f} ms, off {off * 1000:.2f} ms: {(on - off) / off * 100:+.2f}% "
                    f"(switched every 16 steps, medians){reads}; block against next block: "
                    f"{paired * 100:+.2f}% ± {1.96 * se * 100:.2f}% (95%)",
                    flush=True,
                )
            cost = overhead(folder, args.pairs, mode)
            share = (cost["on"] - cost["off"]) / cost["off"] * 100
            pairs = ", ".join(f"{p:+.1f}%" for p in cost["paired"])
            reads = f"; rank 0 held {cost['reads']} Flight Recorder rows" if cost["reads"] else ""
            print(
                f"agent step time, 2 ranks, fixed work ({words}): timing on "
                f"{cost['on'] * 1000:.2f} ms, off (MLDEBUG_TIMING=0) {cost['off'] * 1000:.2f} ms:"
                f" {share:+.1f}% (medians of {cost['runs']['on']}+{cost['runs']['off']} "
                f"alternated runs; pairs {pairs}){reads}",
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
        per_step += 2 * hooks["run_queue_read"]
        per_step += hooks["section_json_per_heartbeat"] * step
        print(
            f"estimated from the hooks: {per_step * 1e6:.0f} us on a {step * 1000:.0f} ms step "
            f"with 2 collectives: {per_step / step * 100:.2f}% of the step"
        )


if __name__ == "__main__":
    main()
