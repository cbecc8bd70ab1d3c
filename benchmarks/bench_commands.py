"""The commands users type, timed as processes (interpreter start included), each beside the
plain alternative run as a process in the same run, and the ratio.

    python benchmarks/bench_commands.py [--only nccl,dump,explain,front,attach] [--ranks 1024]
        [--entries 2000] [--local 32] [--log-mb 1024] [--nodes 16384] [--repeat 1]
        [--attach-ranks 1024] [--attach-seconds 60]

  nccl     `mldebug nccl --json DIR` on RANKS Flight Recorder dumps of ENTRIES entries
           (built as benchmarks/bench_flight.py builds them: torch 2.13's recorded gloo
           dump, its entry repeated; the last rank one collective behind) | a sequential
           `pickle.load` of the same files in one Python process (no checks, no verdict)
  dump     `mldebug dump --json --samples 1 --pid LAUNCHER` on LOCAL plain-Python ranks
           (tests/jobs/sleepy_ranks.py) | a sequential `py-spy dump --pid` loop over them
  explain  `mldebug explain --json LOG` on a SLURM output of LOG_MB (64 ranks interleaved,
           `N: ` prefixes, NCCL INFO lines; the watchdog's timeout at the end) | `grep -c`
           of the watchdog's pattern; then `mldebug nccl --json LOG` on the same log | the
           same `grep -c` (both commands read the whole file in one streaming pass: Hyperscan
           asks every block whether it holds a word, grep reads those that do)
  front    `mldebug dump --slurm 4242` (its text report) on a job of NODES nodes x 8 ranks, SLURM's side
           recorded (squeue, scontrol and an srun that passes on the nodes' documents:
           the documented node format, as `mldebug collect` prints them, one a line): the
           front end reads, merges and judges them | a process that json.loads each
           document and groups the ranks by their main stack in a dict (no states, no
           tree, no verdict)
  attach   `mldebug attach --run DIR` (the live view, in a tmux pane) for --attach-seconds
           on a run of ATTACH_RANKS agent ranks: one process forks them (each a plain
           Python process sitting in train_step, its proc.json as the in-rank hook writes
           it, run.json as `mldebug run` writes it), and one writer process rewrites every
           rank's state.json once a second with the agent's own Heartbeat, five steps on
           each time (ranks that train, seen through their agents) | `py-spy top --pid` on
           one of those ranks for as long. Printed: CPU s of the view and of the py-spy
           runs it started, and that as a percentage of one core (target: 25%)

Each line prints, for both, wall seconds and CPU seconds (the process's and its children's,
best of --repeat) and peak memory (MB, the largest of the process and its children), the
ratios, and what the command said first. The machine may be shared: the load average is
printed; on a loaded machine the CPU ratio is the steadier figure.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
BIN = Path(sys.executable).parent
MLDEBUG = [sys.executable, "-m", "mldebug"]


def run_timed(
    argv: list[str], repeat: int, ok=(0, 1), env: dict | None = None
) -> tuple[float, float, str, float]:
    """(best wall s, largest peak RSS in MB of the process and its waited children, its
    stdout, best CPU s of it and its children: what it cost, whatever else runs)."""
    best, peak, out, cpu = float("inf"), 0.0, "", float("inf")
    for _ in range(repeat):
        with tempfile.TemporaryFile() as sink, tempfile.TemporaryFile() as errors:
            started = time.perf_counter()
            proc = subprocess.Popen(argv, stdout=sink, stderr=errors, env=env)
            _, status, usage = os.wait4(proc.pid, 0)
            wall = time.perf_counter() - started
            proc.returncode = os.waitstatus_to_exitcode(status)
            sink.seek(0)
            out = sink.read().decode("utf-8", "replace")
            if proc.returncode not in ok:
                errors.seek(0)
                tail = errors.read().decode("utf-8", "replace")[-600:]
                raise SystemExit(f"{argv[:4]} exited {proc.returncode}: {tail}")
        best, peak = min(best, wall), max(peak, usage.ru_maxrss / 1024)
        cpu = min(cpu, usage.ru_utime + usage.ru_stime)
    return best, peak, out, cpu


def verdict(out: str) -> str:
    try:
        said = json.loads(out)
        findings = said.get("findings") or [{}]
        return str(said.get("verdict") or findings[0].get("summary") or "(no finding)")[:90]
    except (ValueError, AttributeError):
        return out.strip().splitlines()[0][:90] if out.strip() else "-"


def row(what: str, mine: tuple, plain: tuple, said: str) -> None:
    print(
        f"{what:32} {mine[0]:7.2f} {mine[3]:7.2f} {mine[1]:6.0f} | {plain[0]:7.2f} "
        f"{plain[3]:7.2f} {plain[1]:6.0f} | {mine[0] / plain[0]:5.2f}x "
        f"{mine[3] / max(plain[3], 1e-3):5.2f}x  {said}",
        flush=True,
    )


# ---- nccl: Flight Recorder dumps ----

PLAIN_PICKLE = (
    "import os, pickle, sys\n"
    "d = sys.argv[1]\n"
    "for name in sorted(os.listdir(d)):\n"
    "    with open(os.path.join(d, name), 'rb') as f:\n"
    "        pickle.load(f)\n"
)


def bench_nccl(args, tmp: Path) -> None:
    from bench_flight import make_dumps

    folder = tmp / "fr"
    folder.mkdir()
    size = make_dumps(folder, args.ranks, args.entries)
    print(f"  ({args.ranks} dumps x {args.entries} entries, {size / 1e6:.0f} MB)", flush=True)
    plain = run_timed([sys.executable, "-c", PLAIN_PICKLE, str(folder)], args.repeat)
    mine = run_timed([*MLDEBUG, "nccl", "--json", str(folder)], args.repeat)
    row(
        f"nccl DIR ({args.ranks}x{args.entries} FR)",
        mine,
        plain,
        verdict(mine[2]),
    )
    shutil.rmtree(folder)


# ---- dump: local ranks ----


def bench_dump(args, tmp: Path) -> None:
    from bench_dump import start_ranks

    launcher, pids = start_ranks(args.local)
    loop = "\n".join(
        ["import subprocess, sys"]
        + ["for pid in sys.argv[2:]:"]
        + ["    subprocess.run([sys.argv[1], 'dump', '--pid', pid], capture_output=True)"]
    )
    try:
        time.sleep(0.5)
        py_spy = str(BIN / "py-spy")
        plain = run_timed([sys.executable, "-c", loop, py_spy, *map(str, pids)], args.repeat)
        argv = [*MLDEBUG, "dump", "--json", "--samples", "1", "--pid", str(launcher.pid)]
        mine = run_timed(argv, args.repeat)
    finally:
        os.killpg(launcher.pid, signal.SIGKILL)
        launcher.wait()
    row(f"dump --samples 1 ({args.local} ranks)", mine, plain, verdict(mine[2]))


# ---- explain: a big SLURM output ----

WATCHDOG = (
    "{r}: [rank{r}]:[E1130 21:04:17.523041672 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog "
    "caught collective operation timeout: WorkNCCL(SeqNum=57, OpType=ALLREDUCE, "
    "NumelIn=25165824, NumelOut=25165824, Timeout(ms)=600000) ran for 600071 milliseconds "
    "before timing out.\n"
)


def big_log(path: Path, megabytes: int, ranks: int = 64) -> None:
    block = "".join(
        f"{r}: gpu{r // 8:03d}:{4000 + r}:{4100 + r} [{r % 8}] NCCL INFO Channel {c:02d}/0 : "
        f"{r} -> {(r + 1) % ranks} via P2P/CUMEM/read\n"
        for c in range(4)
        for r in range(ranks)
    ).encode()
    steps = "".join(
        f"{r}: step {s} loss 2.{s:04d} lr 3e-4 tokens/s 81234\n" for s in range(8) for r in range(8)
    ).encode()
    chunk = (block + steps) * max(1, (1 << 20) // (len(block) + len(steps)))
    with open(path, "wb") as out:
        for _ in range(megabytes):
            out.write(chunk)
        out.write("".join(WATCHDOG.format(r=r) for r in range(ranks) if r != 3).encode())
        out.flush()
        os.fsync(out.fileno())  # on disk before anything is timed: no writeback beside it


def bench_explain(args, tmp: Path) -> None:
    log = tmp / "slurm-4242.out"
    big_log(log, args.log_mb)
    mb = log.stat().st_size / 1e6
    plain = run_timed(["grep", "-c", "Watchdog caught collective", str(log)], args.repeat)
    mine = run_timed([*MLDEBUG, "explain", "--json", str(log)], args.repeat)
    row(f"explain LOG ({mb:.0f} MB)", mine, plain, verdict(mine[2]))
    nccl = run_timed([*MLDEBUG, "nccl", "--json", str(log)], args.repeat)
    row(f"nccl LOG ({mb:.0f} MB)", nccl, plain, verdict(nccl[2]))
    prefilters(log, args.repeat)
    log.unlink()


PYTHON_FINDS = (
    "import os, re, sys, time\n"
    "from mldebug.explain.engine import STREAM_WORDS\n"
    "words = [w.encode() for w in STREAM_WORDS]\n"
    "one = re.compile(b'|'.join(re.escape(w) for w in words))\n"
    "fd = os.open(sys.argv[1], os.O_RDONLY)\n"
    "data = os.read(fd, 64 << 20)\n"
    "started = time.process_time()\n"
    "for w in words:\n"
    "    data.find(w)\n"
    "finds = time.process_time() - started\n"
    "started = time.process_time()\n"
    "one.search(data[: 8 << 20])\n"
    "regex = (time.process_time() - started) * 8\n"
    "from mldebug.files import picked, wordblocks\n"
    "started = time.process_time()\n"
    "found = wordblocks.blocks(fd, STREAM_WORDS, picked.cpus())\n"
    "blocks = time.process_time() - started if found is not None else float('nan')\n"
    "started = time.process_time()\n"
    "found = wordblocks.blocks(fd, ('Watchdog caught collective',), picked.cpus())\n"
    "alone = time.process_time() - started if found is not None else float('nan')\n"
    "print(f'{finds:.2f} {regex:.2f} {blocks:.2f} {alone:.2f}')\n"
)
IMPORTS = "import mldebug.cli, mldebug.explain.engine, mldebug.report.explain"


def prefilters(log: Path, repeat: int) -> None:
    """What picks the lines of the readers' words, each over the whole log as a process
    (CPU s): grep -E (what explain runs over the blocks that hold a word, or over all of
    a log without Hyperscan), grep -F with the same words; and Python's own, timed
    in-process over the first 64 MB (bytes.find per word; one regular expression of them
    all, over 8 MB, x8), scaled to the log's size; and Hyperscan asked which blocks of the
    whole log hold one (files/wordblocks.py, its threads' CPU; nan without it). Then the
    rest of explain's cost by itself: its imports, `wc -l` of the log, and Hyperscan's
    blocks of one word (its reading of the bytes)."""
    from mldebug.explain.engine import STREAM_WORDS
    from mldebug.files.picked import ere

    env = {**os.environ, "LC_ALL": "C"}
    size_64 = log.stat().st_size / (64 << 20)
    cpu = {}
    for name, how in (("grep -E", ["-E", "-e", ere(STREAM_WORDS)]), ("grep -F", ["-F"])):
        words = [] if name == "grep -E" else [a for w in STREAM_WORDS for a in ("-e", w)]
        cpu[name] = run_timed(["grep", "-a", "-c", *how, *words, str(log)], repeat, env=env)[3]
    said = subprocess.run(
        [sys.executable, "-c", PYTHON_FINDS, str(log)],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout.split()
    print(
        f"  prefilter, {len(STREAM_WORDS)} words, CPU s over the log: "
        f"grep -E {cpu['grep -E']:.2f}, grep -F {cpu['grep -F']:.2f}, "
        f"Python bytes.find per word {float(said[0]) * size_64:.1f}, "
        f"Python one regex {float(said[1]) * size_64:.1f}, "
        f"Hyperscan's blocks {float(said[2]):.2f}",
        flush=True,
    )
    # explain's CPU beside Hyperscan's blocks: what the rest of it costs by itself
    imports = run_timed([sys.executable, "-c", IMPORTS], repeat)[3]
    lines = run_timed(["wc", "-l", str(log)], repeat, env=env)[3]
    print(
        f"  explain's parts, CPU s: the interpreter and mldebug's imports {imports:.2f}, "
        f"`wc -l` of the log {lines:.2f}, Hyperscan's blocks of one word {float(said[3]):.2f}",
        flush=True,
    )


# ---- front: node documents of the largest jobs ----

# SLURM's side, recorded: a job of NODES nodes that is RUNNING, its one step of 8 tasks a
# node (block distribution), and srun --overlap passing on the nodes' documents as each
# node's `mldebug collect` prints it (one a line). A 16,384-node SLURM cannot exist here.
SQUEUE = "#!/bin/sh\necho 'RUNNING|gpu[00000-{last:05d}]'\n"
SCONTROL = (
    "#!/bin/sh\necho 'StepId=4242.0 UserId=me(1000) State=RUNNING "
    "NodeList=gpu[00000-{last:05d}] Tasks={tasks} Dist=Block'\n"
)
SRUN = "#!/bin/sh\nexec cat {docs}\n"


def recorded_slurm(folder: Path, docs: Path, nodes: int) -> dict:
    """PATH with the recorded squeue, scontrol and srun first."""
    folder.mkdir()
    for name, text in (("squeue", SQUEUE), ("scontrol", SCONTROL), ("srun", SRUN)):
        tool = folder / name
        tool.write_text(text.format(last=nodes - 1, tasks=nodes * 8, docs=docs))
        tool.chmod(0o755)
    return {**os.environ, "PATH": f"{folder}{os.pathsep}{os.environ['PATH']}"}


PLAIN_GROUPS = (
    "import json, sys\n"
    "groups = {}\n"
    "with open(sys.argv[1], 'rb') as f:\n"
    "    for line in f:\n"
    "        doc = json.loads(line)\n"
    "        stacks = doc['stacks']\n"
    "        for r in doc['ranks']:\n"
    "            key = tuple((fr[0], fr[1], fr[2]) for fr in stacks[r['stack']][0]['frames'])\n"
    "            groups.setdefault(key, []).append(r['rank'])\n"
    "print(len(groups), 'groups')\n"
)


def node_documents(path: Path, nodes: int, per_node: int = 8) -> int:
    """NODES documents as `mldebug collect` writes them, one a line after its host: three
    kinds of node made by the real writer (bench_cluster_merge.py's job: ranks waiting in
    all_reduce, one in 64 nodes with a rank in a barrier, one rank loading data), each
    copied with its own host, ranks and pids."""
    from bench_cluster_merge import documents, synthetic

    targets, samples, world = synthetic(128, per_node)
    kinds = {}
    for host, text in documents(targets, samples, per_node, {}):  # no agent states
        doc = json.loads(text)
        node = int(host[3:])
        key = "loading" if any(r["rank"] == world // 2 + 3 for r in doc["ranks"]) else None
        key = key or ("barrier" if node % 64 == 7 else "waiting")
        kinds.setdefault(key, doc)
    total_world = nodes * per_node
    culprit = total_world // 2 + 3
    size = 0
    with open(path, "w") as out:
        for node in range(nodes):
            first = node * per_node
            kind = "barrier" if node % 64 == 7 else "waiting"
            if first <= culprit < first + per_node:
                kind = "loading"
            doc = copy.deepcopy(kinds[kind])
            base = doc["ranks"][0]["rank"]
            host = f"gpu{node:05d}"
            doc["host"], doc["world_size"] = host, total_world
            for rank in doc["ranks"]:
                rank["rank"] += first - base
                rank["pid"] = 20_000 + rank["rank"]
                rank["world_size"] = total_world
            for group in doc["groups"]:
                group["ranks"] = [r + first - base for r in group["ranks"]]
            line = json.dumps(doc) + "\n"
            size += len(line)
            out.write(line)
    return size


def bench_front(args, tmp: Path) -> None:
    docs = tmp / "nodes.jsonl"
    size = node_documents(docs, args.nodes)
    print(f"  ({args.nodes} node documents, {size / 1e6:.0f} MB)", flush=True)
    plain = run_timed([sys.executable, "-c", PLAIN_GROUPS, str(docs)], args.repeat)
    env = recorded_slurm(tmp / "slurm", docs, args.nodes)
    argv = [*MLDEBUG, "dump", "--slurm", "4242", "--deadline", "600"]
    mine = run_timed(argv, args.repeat, env=env)
    row(f"dump --slurm ({args.nodes * 8} ranks)", mine, plain, verdict(mine[2]))
    docs.unlink()


# ---- attach: the live view of a run of many agent ranks ----

# One process forks the ranks: each is a plain Python process (no torch) that sits in
# train_step, found by `attach --run` as `mldebug run`'s ranks are (MLDEBUG_RUN_DIR and a
# rank variable in its environment, its proc.json as the in-rank hook writes it).
RANK_HOST = """
import os, sys, time
from pathlib import Path
from mldebug.files import procfs, rundir, safeio

paths = rundir.RunPaths(Path(sys.argv[1]))


def train_step():
    time.sleep(3600)


pids = []
for rank in range(int(sys.argv[2])):
    pid = os.fork()
    if pid == 0:
        safeio.make_private_dir(paths.rank_dir(rank))
        safeio.write_json_atomic(paths.proc_info(rank), {
            "rank": rank, "local_rank": rank, "world_size": int(sys.argv[2]),
            "host": rundir.hostname(), "pid": os.getpid(), "start_time": time.time(),
            "start_ticks": procfs.proc_start_ticks(), "owner": str(os.getpid()),
            "stack_signal": None, "main_thread": None,
        })
        while True:
            train_step()
    pids.append(pid)
print(" ".join(map(str, pids)), flush=True)
while True:
    time.sleep(3600)
"""


# The agents' side, in one process: each rank's state.json written by the agent's own
# Heartbeat (with the rank's pid, so that the reader takes it as that rank's), once a
# second as the agent's heartbeat does, five steps on each time; writer K of WRITERS writes
# the ranks K, K + WRITERS, ...
STATE_WRITER = """
import sys, time
from pathlib import Path
from mldebug.agent.heartbeat import Heartbeat
from mldebug.agent.steps import Steps
from mldebug.files import rundir, safeio

paths = rundir.RunPaths(Path(sys.argv[1]))
beats = []
for rank, pid in list(enumerate(map(int, sys.argv[3:])))[int(sys.argv[2])::WRITERS]:
    steps = Steps()
    beat = Heartbeat(paths.state_file(rank), safeio.write_json_atomic, rank, time.time(),
                     None, steps, None, 1.0)
    beat.pid = pid
    beats.append((steps, beat))
while True:
    began = time.time()
    for steps, beat in beats:
        steps.set((steps.value or 0) + 5)
        beat.write_once()
    if beats[0][1].writes == 1:
        print("written", flush=True)
    time.sleep(max(0.0, 1.0 - (time.time() - began)))
"""
WRITERS = 4  # the agents write from their own processes: a few writers share the ranks


def agent_run(folder: Path, count: int) -> tuple[list[subprocess.Popen], list[int], Path]:
    """A run directory of `count` agent ranks that train: (processes to stop, the ranks'
    pids, the directory)."""
    from mldebug.files import rundir
    from mldebug.launch.manifest import Manifest
    from mldebug.launch.spec import LaunchSpec

    paths = rundir.create_run_dir(folder / "run")
    spec = LaunchSpec(paths, ["train.py"], nproc=count)
    manifest = Manifest(paths, spec, rundir.hostname())
    env = {**os.environ, "MLDEBUG_RUN_DIR": str(paths.root), "RANK": "0"}
    env.update(WORLD_SIZE=str(count), LOCAL_RANK="0", MASTER_ADDR="127.0.0.1")
    host = subprocess.Popen(
        [sys.executable, "-c", RANK_HOST, str(paths.root), str(count)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    pids = [int(p) for p in host.stdout.readline().split()] if host.stdout else []
    if len(pids) != count:
        raise SystemExit(f"the rank host started {len(pids)} of {count} ranks")
    manifest.update(world_size=count)
    for rank, pid in enumerate(pids):
        manifest.set_rank(rank, pid=pid, local_rank=rank, host=rundir.hostname())
    manifest.write()
    code = STATE_WRITER.replace("WRITERS", str(WRITERS))
    writers = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(paths.root), str(k), *map(str, pids)],
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        for k in range(WRITERS)
    ]
    for writer in writers:  # every rank's state.json written once
        if writer.stdout is None or writer.stdout.readline().strip() != "written":
            raise SystemExit("a state writer did not start")
    return [host, *writers], pids, paths.root


def bench_attach(args, tmp: Path) -> None:
    from bench_tui import measure

    count, seconds = args.attach_ranks, args.attach_seconds
    procs, pids, run_dir = agent_run(tmp, count)
    try:
        view = measure(
            [*MLDEBUG, "attach", "--run", str(run_dir)], f"{count}/{count} ranks", seconds, 5.0
        )
        plain = measure(["py-spy", "top", "--pid", str(pids[0])], "Control-C", seconds, 5.0)
    finally:
        for proc in procs:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    mine, theirs = view["own"] + view["children"], plain["own"] + plain["children"]
    status = [line.strip() for line in view["screen"].splitlines() if "ranks:" in line]
    print(
        f"{'attach --run (' + str(count) + ' agent ranks)':32} {view['wall']:5.0f} s: "
        f"CPU {mine:6.2f} s = {100 * mine / view['wall']:5.1f}% of a core (view "
        f"{view['own']:.2f} s, its py-spy runs {view['children']:.2f} s) | py-spy top on one "
        f"rank: {theirs:.2f} s = {100 * theirs / plain['wall']:.1f}% | "
        f"{mine / max(theirs, 1e-3):5.2f}x  target <= 25% of a core: "
        f"{'met' if 100 * mine / view['wall'] <= 25 else 'NOT met'}",
        flush=True,
    )
    if status:
        print(f"  the view's status line at the end: {status[-1]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="nccl,dump,explain,front")
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--entries", type=int, default=2000)
    parser.add_argument("--local", type=int, default=32)
    parser.add_argument("--log-mb", type=int, default=1024)
    parser.add_argument("--nodes", type=int, default=16384)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--attach-ranks", type=int, default=1024)
    parser.add_argument("--attach-seconds", type=float, default=60.0)
    args = parser.parse_args()
    # A `timeout` or a kill of the benchmark ends it through its `finally`s, which stop the
    # ranks it started (1,024 for attach): left behind they load the machine for hours.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    signal.signal(signal.SIGHUP, lambda *_: sys.exit(129))
    # As pip does at install: mldebug's modules compiled to bytecode before any is timed
    # (a process that compiles its imports each time, PYTHONDONTWRITEBYTECODE set, pays
    # about half a second more).
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "mldebug")], check=True)
    print(f"load average {os.getloadavg()[0]:.1f}; {os.cpu_count()} CPUs; best of {args.repeat}")
    print(
        f"{'':32} {'mldebug':>22} | {'plain alternative':>22} | {'ratio':>12}\n"
        f"{'command':32} {'wall s':>7} {'CPU s':>7} {'MB':>6} | {'wall s':>7} {'CPU s':>7} "
        f"{'MB':>6} | {'wall':>6} {'CPU':>5}  first thing said"
    )
    benches = {"nccl": bench_nccl, "dump": bench_dump, "explain": bench_explain}
    benches["front"] = bench_front
    benches["attach"] = bench_attach
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only.split(","):
            benches[name](args, Path(tmp))
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
