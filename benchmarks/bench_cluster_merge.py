"""Merging node documents (`dump --slurm/--hosts`) against merging the same ranks flat.

    python benchmarks/bench_cluster_merge.py [--nodes 16,128,1024] [--per-node 8] [--repeat 3]

Synthetic, realistic job: 8 ranks per node, 40-frame main stacks plus 3 background threads
per rank (pin-memory, a checkpoint writer, the agent's heartbeat); most ranks wait in
all_reduce, one rank per 64 nodes in a barrier from evaluation, one rank loads data (the
culprit). Each node is judged on its own as `mldebug collect` does (not timed: that work
runs on the nodes, in parallel) and written as its JSON document.

Timed, best of --repeat:
  front end   what `dump --slurm` does once the documents are in: json.loads of each
              node's document, reading it (cluster.document.Reader) and merging the nodes
              (analysis.nodes.merge_nodes: groups, tree, findings)
  flat        the same ranks read on one machine: build_snapshot over every rank's three
              samples (states, groups, tree, findings), as `dump` does for a local job
and the stack merge alone (the STAT part): the nodes' classes merged (merge_groups +
build_tree) against every rank's main stack grouped flat (group_stacks + build_tree).
Target: under 1 s for 8,192 ranks (1,024 nodes x 8).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from mldebug.analysis.merge import build_tree, group_stacks, merge_groups
from mldebug.analysis.nodes import merge_nodes
from mldebug.analysis.snapshot import build_snapshot, rank_views
from mldebug.cluster.document import Reader, bulk_reading, node_document
from mldebug.collect.agentstate import parse_state
from mldebug.model import Frame, RankTarget, StackSample, ThreadStack

C10D = "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"
LOGGER = "/venv/lib/python3.11/site-packages/torch/distributed/c10d_logger.py"
LIB = "/venv/lib/python3.11/site-packages/trainer/engine.py"
THREADING = "/usr/lib/python3.11/threading.py"
TRAIN = "/home/me/proj/train.py"


def main_stacks(depth: int) -> dict[str, tuple[Frame, ...]]:
    common = [Frame("<module>", TRAIN, 300), Frame("main", TRAIN, 280)]
    common += [Frame(f"layer_{i}", LIB, 100 + i) for i in range(depth - 6)]
    tails = {
        "waiting": [Frame("train_step", TRAIN, 120), Frame("wrapper", LOGGER, 83)]
        + [Frame("all_reduce", C10D, 3252), Frame("wait", C10D, 3260)],
        "barrier": [Frame("evaluate", TRAIN, 150), Frame("wrapper", LOGGER, 83)]
        + [Frame("barrier", C10D, 4700), Frame("wait", C10D, 4710)],
        "loading": [Frame("load_batch", TRAIN, 90), Frame("read", LIB, 10)]
        + [Frame("wait", THREADING, 320), Frame("acquire", THREADING, 330)],
    }
    return {name: (*common, *tail) for name, tail in tails.items()}


def background() -> tuple[ThreadStack, ...]:
    loop = [Frame("_bootstrap", THREADING, 995), Frame("_bootstrap_inner", THREADING, 1038)]
    return tuple(
        ThreadStack(i + 2, name, (*loop, Frame("run", THREADING, 975), Frame(fn, LIB, 40 + i)))
        for i, (name, fn) in enumerate(
            [("pin_memory", "_pin_memory_loop"), ("ckpt-writer", "drain"), ("mldebug", "beat")]
        )
    )


def synthetic(nodes: int, per_node: int, depth: int = 40):
    stacks, others = main_stacks(depth), background()
    world = nodes * per_node
    targets, samples = [], {}
    for rank in range(world):
        node = rank // per_node
        name = "loading" if rank == world // 2 + 3 else "waiting"
        if rank % per_node == 5 and node % 64 == 7:
            name = "barrier"
        host = f"gpu{node:04d}"
        target = RankTarget(pid=20_000 + rank, rank=rank, world_size=world, host=host, job="j")
        threads = (ThreadStack(1, "MainThread", stacks[name]), *others)
        samples[target.pid] = tuple(
            StackSample(target, 100.0 + t, threads, cpu_seconds=5.0, main_cpu_seconds=1.0)
            for t in range(3)
        )
        targets.append(target)
    return targets, samples, world


def agent_files(targets, state: dict | None) -> dict[int, dict]:
    """pid -> a copy of one real state.json made this rank's (--agent-state)."""
    if state is None:
        return {}
    return {t.pid: {**state, "rank": t.rank, "pid": t.pid} for t in targets}


def documents(targets, samples, per_node: int, files: dict) -> list[tuple[str, str]]:
    out = []
    for start in range(0, len(targets), per_node):
        mine = targets[start : start + per_node]
        agents = {t.pid: parse_state(files[t.pid], t.rank) for t in mine if t.pid in files}
        snapshot = build_snapshot(mine, samples, now=110.0, partial=True, agents=agents)
        views, failures = rank_views(mine, samples, now=110.0, partial=True, agents=agents)
        document = node_document(
            snapshot, mine[0].host, views=views, failures=failures, agent_files=files
        )  # as `mldebug collect` writes it
        out.append((mine[0].host, json.dumps(document)))
    return out


def front_end(docs: list[tuple[str, str]]):
    reader = Reader()
    with bulk_reading():  # as cluster.front.collect_cluster reads and merges
        nodes = [reader.read(json.loads(text), host) for host, text in docs]
        return merge_nodes(nodes, now=110.0)


def best(repeat: int, work) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = work()
        times.append(time.perf_counter() - start)
    return min(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="16,128,1024")
    parser.add_argument("--per-node", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--agent-state",
        metavar="DOC",
        help="a recorded node document (tests/data/nodes/): its first rank's state.json "
        "is given to every rank, as under `mldebug run`",
    )
    args = parser.parse_args()
    state = None
    if args.agent_state:
        state = json.loads(Path(args.agent_state).read_text())["ranks"][0]["agent"]
    print(
        f"{'nodes':>6} {'ranks':>6} {'doc KiB':>8} {'front end s':>12} {'flat s':>8} "
        f"{'tree: nodes s':>13} {'tree: flat s':>12} {'groups':>6}  verdict"
    )
    for nodes in (int(n) for n in args.nodes.split(",")):
        targets, samples, world = synthetic(nodes, args.per_node)
        files = agent_files(targets, state)
        agents = {pid: parse_state(data, data["rank"]) for pid, data in files.items()}
        docs = documents(targets, samples, args.per_node, files)
        size = sum(len(text) for _, text in docs) / len(docs) / 1024
        front, merged = best(args.repeat, lambda docs=docs: front_end(docs))
        flat, alone = best(
            args.repeat,
            lambda t=targets, s=samples, w=world, a=agents: build_snapshot(
                t, s, world_size=w, now=110.0, agents=a
            ),
        )
        assert [f.summary for f in merged.findings] == [f.summary for f in alone.findings]
        reader = Reader()
        read = [reader.read(json.loads(text), host) for host, text in docs]
        by_node, _ = best(
            args.repeat, lambda read=read: build_tree(merge_groups([n.groups for n in read]))
        )
        mains = {v.rank: v.threads[0].frames for v in alone.ranks}
        by_rank, _ = best(args.repeat, lambda mains=mains: build_tree(group_stacks(mains)))
        verdict = merged.findings[0].summary[:60] if merged.findings else "-"
        print(
            f"{nodes:>6} {world:>6} {size:>8.1f} {front:>12.3f} {flat:>8.3f} "
            f"{by_node:>13.4f} {by_rank:>12.4f} {len(merged.groups):>6}  {verdict}"
        )


if __name__ == "__main__":
    main()
