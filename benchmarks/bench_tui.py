"""CPU cost of the live view (`mldebug attach`) per refresh, in a real terminal (tmux).

    python benchmarks/bench_tui.py             # real16 and synthetic256, 20 s each
    python benchmarks/bench_tui.py --seconds 60 --case synthetic256
    python benchmarks/bench_tui.py --case agent128 --seconds 60

Cases:
  real16        16 real rank processes (plain Python sitting in a stack, with rank
                environment), read by the real collector and py-spy, via `mldebug attach --pid`.
  synthetic256  256 synthetic ranks from a fake poller; every refresh changes the CPU and
                memory cells of every rank and moves the odd rank (the worst case for the table).
  agent128      128 real ranks under `mldebug run --nproc-per-node 128`, each with the in-rank
                agent (plain Python that imports nothing heavy and calls `mldebug.step()` five
                times a second), watched by `mldebug attach --run DIR`; then the same view with
                MLDEBUG_WATCH_ALL=1, which reads every rank's stack at every poll as attach did
                before ranks that move were left unread. The figure is the whole cost: the
                TUI process and every py-spy it started. Target: under 25% of one core.

For each case: CPU time of the TUI process itself (all its threads) per second of wall time
at the default 1 s refresh, as a percentage of one core; and, for real16, the CPU of the
py-spy processes it started, then, as the plain alternative, the CPU of `py-spy top` watching
one of the 16 ranks. Target: the TUI under 20% of one core.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
SITTER = """
import time
def wait_in_collective():
    print("up", flush=True)
    time.sleep(3600)
wait_in_collective()
"""


STEPPER = """
import time
import mldebug

def train_step():
    time.sleep(0.2)

while True:
    train_step()
    mldebug.step()
"""

SERVER = [0]  # a new tmux server for each measurement: a killed one may linger a moment


def tmux(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["tmux", "-L", f"mldebug-bench-{os.getpid()}-{SERVER[0]}", *args],
        capture_output=True,
        text=True,
        check=check,
    )


def start_ranks(count: int) -> list[subprocess.Popen]:
    procs = []
    for rank in range(count):
        env = {
            **os.environ,
            "RANK": str(rank),
            "WORLD_SIZE": str(count),
            "LOCAL_RANK": str(rank),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": "29999",
        }
        proc = subprocess.Popen(
            [sys.executable, "-c", SITTER],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            start_new_session=True,
        )
        procs.append(proc)
    for proc in procs:
        proc.stdout.readline()
    return procs


def measure(command: list[str], ready: str, seconds: float, warmup: float) -> dict:
    """Run `command` in a 160x48 tmux pane; once `ready` is on screen, measure its CPU."""
    tmux("new-session", "-d", "-s", "bench", "-x", "160", "-y", "48", "exec " + shlex.join(command))
    try:
        pid = int(tmux("display-message", "-p", "-t", "bench", "#{pane_pid}").stdout)
        deadline = time.monotonic() + 60
        while ready not in tmux("capture-pane", "-p", "-t", "bench", check=False).stdout:
            if time.monotonic() > deadline:
                screen = tmux("capture-pane", "-p", "-t", "bench", check=False).stdout
                raise SystemExit(f"the view never showed {ready!r}; the screen:\n{screen}")
            time.sleep(0.5)
        time.sleep(warmup)
        proc = psutil.Process(pid)
        before, wall0 = proc.cpu_times(), time.monotonic()
        time.sleep(seconds)
        after, wall = proc.cpu_times(), time.monotonic() - wall0
        screen = tmux("capture-pane", "-p", "-t", "bench", check=False).stdout
        own = (after.user + after.system) - (before.user + before.system)
        children = (after.children_user + after.children_system) - (
            before.children_user + before.children_system
        )
        return {
            "wall": wall,
            "own": own,
            "children": children,
            "screen": screen,
            "rss": proc.memory_info().rss,
        }
    finally:
        tmux("kill-server", check=False)
        SERVER[0] += 1


def report(name: str, result: dict, target: float | None = None) -> None:
    """One line of figures. `target` (% of one core) applies to the whole cost, else to the
    TUI process alone (20%)."""
    own_pct = 100 * result["own"] / result["wall"]
    print(
        f"{name}: TUI process {own_pct:.1f}% of one core "
        f"({1000 * result['own'] / result['wall']:.0f} ms CPU per 1 s refresh), "
        f"RSS {result['rss'] / 2**20:.0f} MiB",
        end="",
    )
    if result["children"]:
        print(
            f"; py-spy children {100 * result['children'] / result['wall']:.1f}% of one core; "
            f"whole cost {100 * (result['own'] + result['children']) / result['wall']:.1f}%",
            end="",
        )
    if target is None:
        verdict = f"target < 20%: {'OK' if own_pct < 20 else 'MISSED'}"
    else:
        verdict = f"target (whole) < {target:g}%: {'OK' if whole(result) < target else 'MISSED'}"
    print(f"  [{result['wall']:.0f} s measured]  {verdict}")
    status = [line for line in result["screen"].splitlines() if "ranks:" in line]
    if status:  # says "last poll took N s" when polls are slower than the refresh
        print(f"  status line at the end: {status[-1].strip()}")


def start_run(count: int, folder: Path) -> subprocess.Popen:
    """`mldebug run` of `count` stepping ranks; returns once every rank's agent beats."""
    script = folder / "stepper.py"
    script.write_text(STEPPER)
    run_dir = folder / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "mldebug", "run", "--run-dir", str(run_dir),
         "--nproc-per-node", str(count), str(script)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    deadline = time.monotonic() + 180
    states = [run_dir / "ranks" / str(rank) / "state.json" for rank in range(count)]
    while not all(path.exists() for path in states):
        if time.monotonic() > deadline or proc.poll() is not None:
            raise SystemExit(f"the {count} ranks of {run_dir} never all wrote state.json")
        time.sleep(0.5)
    return proc


def stop_run(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def whole(result: dict) -> float:
    return 100 * (result["own"] + result["children"]) / result["wall"]


def agent_case(count: int, seconds: float, warmup: float) -> None:
    with tempfile.TemporaryDirectory(prefix="mldebug-bench-") as folder:
        run = start_run(count, Path(folder))
        try:
            view = [sys.executable, "-m", "mldebug", "attach", "--run", str(Path(folder) / "run")]
            ready = f"{count}/{count} ranks"
            now = measure(view, ready, seconds, warmup)
            report(f"agent{count}, ranks that move left unread", now, target=25.0)
            before = measure(["env", "MLDEBUG_WATCH_ALL=1", *view], ready, seconds, warmup)
            report(f"agent{count}, every rank read (MLDEBUG_WATCH_ALL=1)", before, target=25.0)
            print(
                f"agent{count}: whole cost {whole(now):.1f}% of one core, against "
                f"{whole(before):.1f}% reading every rank at every poll  "
                f"target < 25%: {'OK' if whole(now) < 25 else 'MISSED'}"
            )
        finally:
            stop_run(run)


def serve_synthetic(count: int) -> None:
    """The TUI over a fake poller (the same synthetic job the tests use)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from testkit.tui_fakes import FakePoller, hung_job

    from mldebug.commands.attach import live_app

    def make(tick: int):
        return hung_job(count, outlier=tick % count, tick=tick)

    live_app(FakePoller(make), interval=1.0, job_name=f"synthetic, {count} ranks").run()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument(
        "--case", choices=("real16", "synthetic256", "agent128", "both"), default="both"
    )
    parser.add_argument("--serve-synthetic", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_synthetic:
        serve_synthetic(args.serve_synthetic)
        return
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    if args.case in ("synthetic256", "both"):
        result = measure(
            [sys.executable, __file__, "--serve-synthetic", "256"],
            "256/256 ranks",
            args.seconds,
            args.warmup,
        )
        report("synthetic256", result)
    if args.case == "agent128":
        agent_case(128, args.seconds, args.warmup)
    if args.case in ("real16", "both"):
        ranks = start_ranks(16)
        try:
            pids = [arg for proc in ranks for arg in ("--pid", str(proc.pid))]
            result = measure(
                [sys.executable, "-m", "mldebug", "attach", *pids],
                "16/16 ranks",
                args.seconds,
                args.warmup,
            )
            report("real16", result)
            # The plain alternative: py-spy's own live view, on one rank only.
            pyspy = measure(
                ["py-spy", "top", "--pid", str(ranks[0].pid)],
                "Press Control-C to quit",
                args.seconds,
                args.warmup,
            )
            print(
                f"plain alternative, py-spy top on 1 of the 16 ranks: "
                f"{100 * pyspy['own'] / pyspy['wall']:.1f}% of one core  "
                f"[{pyspy['wall']:.0f} s measured]"
            )
        finally:
            for proc in ranks:
                proc.kill()
                proc.wait()


if __name__ == "__main__":
    main()
