"""What the agent's compile sampling costs each heartbeat (agent/compiles.py).

Once the program imported torch._dynamo, the heartbeat walks its main thread's frames and
asks rankrules.compile_phase_in whether one is a compile entry point. This prints the time
of one such sample with the main thread at a given depth (a training loop about 30 frames
deep, a dynamo + inductor compile about 90), beside the plain alternative it is made of:
`sys._current_frames()` and a walk of the frames that looks at nothing.

    python benchmarks/bench_compile_sampling.py [--depths 30,90,400] [--samples 2000]
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
import types

import mldebug.rankrules as rankrules
from mldebug.agent.compiles import Compiles


def _deep(depth: int, ready: threading.Event, done: threading.Event) -> None:
    if depth > 1:
        _deep(depth - 1, ready, done)
        return
    ready.set()
    done.wait(600)


def _plain_walk(main: int) -> int:
    frame, n = sys._current_frames().get(main), 0
    while frame is not None:
        n += 1
        frame = frame.f_back
    return n


def measure(depth: int, samples: int) -> tuple[float, float]:
    """(µs per compile sample, µs per plain walk) with a thread `depth` frames deep, that
    thread taken as the 'main' one."""
    ready, done = threading.Event(), threading.Event()
    worker = threading.Thread(target=_deep, args=(depth, ready, done), daemon=True)
    worker.start()
    ready.wait(10)
    compiles = Compiles(rankrules)
    compiles._main = worker.ident  # the thread to sample
    start = time.perf_counter()
    for _ in range(samples):
        compiles.sample()
    ours = (time.perf_counter() - start) / samples * 1e6
    start = time.perf_counter()
    for _ in range(samples):
        _plain_walk(worker.ident or 0)
    plain = (time.perf_counter() - start) / samples * 1e6
    done.set()
    worker.join(10)
    return ours, plain


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--depths", default="30,90,400")
    parser.add_argument("--samples", type=int, default=2000)
    args = parser.parse_args()
    if "torch._dynamo" not in sys.modules:  # the agent walks only once dynamo is imported
        sys.modules["torch._dynamo"] = types.ModuleType("torch._dynamo")
    print("depth  compile sample (µs)  plain walk (µs)")
    for depth in (int(d) for d in args.depths.split(",")):
        ours, plain = measure(depth, args.samples)
        print(f"{depth:5d}  {ours:19.1f}  {plain:15.1f}")


if __name__ == "__main__":
    main()
