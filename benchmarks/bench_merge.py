"""How merging and the verdict grow with the number of ranks.

    python benchmarks/bench_merge.py [--ranks 1000,10000,100000] [--depth 30] [--repeat 3]

Builds synthetic samples (two readings per rank, 30 frames per stack) where most ranks wait
in all_reduce and a few are elsewhere, then times `build_snapshot` (state per rank, groups,
prefix tree, thread sets, findings) and reports the best of --repeat runs. Beside it, the
plain alternative a person would script: group ranks by identical last stack in a dict
(no states, no tree, no verdict). Target: 10,000 ranks in under 0.5 s, linear growth.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mldebug.analysis.merge import build_tree, group_stacks
from mldebug.analysis.snapshot import build_snapshot
from mldebug.model import Frame, RankTarget, StackSample, ThreadStack

C10D = "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"
LIB = "/venv/lib/python3.11/site-packages/trainer/engine.py"
TRAIN = "/home/me/proj/train.py"


def stacks(depth: int) -> tuple[tuple[Frame, ...], tuple[Frame, ...], tuple[Frame, ...]]:
    """Three distinct stacks of `depth` frames: waiting in all_reduce, in barrier, loading."""
    common = [Frame("<module>", TRAIN, 300), Frame("main", TRAIN, 280)]
    common += [Frame(f"layer_{i}", LIB, 100 + i) for i in range(depth - 6)]
    waiting = (
        *common,
        Frame("train_step", TRAIN, 120),
        Frame("wrapper", "/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py", 83),
        Frame("all_reduce", C10D, 3252),
        Frame("wait", C10D, 3260),
    )
    barrier = (
        *common,
        Frame("evaluate", TRAIN, 150),
        Frame("wrapper", LIB, 83),
        Frame("barrier", C10D, 4700),
        Frame("wait", C10D, 4710),
    )
    loading = (
        *common,
        Frame("load_batch", TRAIN, 90),
        Frame("read", LIB, 10),
        Frame("wait", "/usr/lib/python3.11/threading.py", 320),
        Frame("acquire", "/usr/lib/python3.11/threading.py", 330),
    )
    return waiting, barrier, loading


def synthetic(ranks: int, depth: int):
    waiting, barrier, loading = stacks(depth)
    targets, samples = [], {}
    for rank in range(ranks):
        frames = loading if rank % 997 == 13 else barrier if rank % 1009 == 7 else waiting
        target = RankTarget(pid=10_000 + rank, rank=rank, world_size=ranks)
        thread = (ThreadStack(1, "MainThread", frames),)
        samples[target.pid] = (
            StackSample(target, 0.0, thread, cpu_seconds=1.0, main_cpu_seconds=1.0),
            StackSample(target, 0.8, thread, cpu_seconds=1.0, main_cpu_seconds=1.0),
        )
        targets.append(target)
    return targets, samples


def measure(ranks: int, depth: int, repeat: int) -> tuple[float, float, int, int]:
    """build_snapshot's best wall and CPU seconds, its groups and findings."""
    targets, samples = synthetic(ranks, depth)
    best, cpu = float("inf"), float("inf")
    for _ in range(repeat):
        started, used = time.perf_counter(), time.process_time()
        snapshot = build_snapshot(targets, samples, world_size=ranks)
        best = min(best, time.perf_counter() - started)
        cpu = min(cpu, time.process_time() - used)
    return best, cpu, len(snapshot.groups), len(snapshot.findings)


def merge_only(ranks: int, depth: int, repeat: int) -> tuple[float, float]:
    """analysis/merge.py alone: ranks grouped by stack (group_stacks) and the prefix tree."""
    targets, samples = synthetic(ranks, depth)
    stacks = {t.rank: samples[t.pid][-1].threads[0].frames for t in targets}
    best, cpu = float("inf"), float("inf")
    for _ in range(repeat):
        started, used = time.perf_counter(), time.process_time()
        build_tree(group_stacks(stacks))
        best = min(best, time.perf_counter() - started)
        cpu = min(cpu, time.process_time() - used)
    return best, cpu


def plain_grouping(ranks: int, depth: int, repeat: int) -> tuple[float, float]:
    """Ranks grouped by their identical last main-thread stack: `{stack: [ranks]}`."""
    targets, samples = synthetic(ranks, depth)
    best, cpu = float("inf"), float("inf")
    for _ in range(repeat):
        started, used = time.perf_counter(), time.process_time()
        groups: dict[tuple, list[int]] = {}
        for target in targets:
            frames = samples[target.pid][-1].threads[0].frames
            key = tuple((f.function, f.file, f.line) for f in frames)
            groups.setdefault(key, []).append(target.rank)
        best = min(best, time.perf_counter() - started)
        cpu = min(cpu, time.process_time() - used)
    return best, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default="1000,10000,100000")
    parser.add_argument("--depth", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}; seconds as wall / CPU, best of {args.repeat}")
    print(
        f"{'ranks':>8}  {'plain dict':>13}  {'merge.py':>13}  {'ratio':>5}  "
        f"{'build_snapshot':>14}  {'us/rank':>7}  groups  findings"
    )
    for count in (int(n) for n in args.ranks.split(",")):
        plain = plain_grouping(count, args.depth, args.repeat)
        merged = merge_only(count, args.depth, args.repeat)
        wall, cpu, groups, findings = measure(count, args.depth, args.repeat)
        print(
            f"{count:>8}  {plain[0]:6.3f}/{plain[1]:6.3f}  {merged[0]:6.3f}/{merged[1]:6.3f}  "
            f"{merged[1] / plain[1]:5.1f}  {wall:6.3f}/{cpu:7.3f}  {cpu / count * 1e6:7.1f}  "
            f"{groups:>6}  {findings:>8}"
        )


if __name__ == "__main__":
    main()
