"""How fast `mldebug nccl` reads NCCL debug logs, beside `grep -c` on the same files.

Writes 256 synthetic per-rank logs (one `NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,COLL` file
per rank, as `mldebug run --nccl-debug INFO` leaves them in <run>/nccl/, made of the line
shapes NCCL 2.28 writes: init, channels, trees, one line per collective, a few WARNs) and
each rank's stderr with torch's watchdog messages, at least 256 MB in all, into a temporary
directory. Then, in one run: `grep -c "NCCL WARN"` over every file (the plain alternative,
one process, all the files), and mldebug's parser over the same files on one core
(`taskset`), in a fresh process, with the growth of its peak RSS while it reads. Both are
timed by the wall clock and by the CPU time they used: on a machine others share, the wall
clock counts their turns too, the CPU time does not.

    python benchmarks/bench_nccl.py [--ranks 256] [--mb 256]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def nccl_log(rank: int, ranks: int, size: int) -> bytes:
    """One rank's NCCL log of about `size` bytes."""
    host, pid = f"node{rank // 8:03d}", 10000 + rank
    p = f"{host}:{pid}:{pid} [{rank % 8}] NCCL INFO "
    net = "Socket" if rank == 77 else "IB"  # one rank on sockets: the odd one out
    head = [
        f"{p}cudaDriverVersion 12040",
        f"{p}Bootstrap : Using ib0:10.0.{rank // 8}.{rank % 8 + 1}<0>",
        f"{p}NCCL version 2.21.5+cuda12.4",
        f"{p}NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB ib0:10.0.{rank // 8}.1<0>",
        f"{p}Using network {net}",
        f"{p}ncclCommInitRank comm 0x55d0c8a0 rank {rank} nranks {ranks} cudaDev {rank % 8} "
        f"nvmlDev {rank % 8} busId {rank % 8}1000 commId 0x5e1f2a3b4c5d6e7f - Init START",
    ]
    for channel in range(32):
        head.append(f"{p}Channel {channel:02d}/32 :    0   1   2   3   4   5   6   7")
        head.append(
            f"{p}Channel {channel:02d}/0 : {rank}[{rank % 8}] -> {(rank + 1) % ranks}"
            f"[{(rank + 1) % 8}] [send] via NET/IB/0"
        )
    head.append(f"{p}Trees [0] 1/-1/-1->0->-1 [1] 1/-1/-1->0->-1 [2] 1/-1/-1->0->-1")
    head.append(f"{p}Connected all rings")
    head.append(
        f"{p}ncclCommInitRank comm 0x55d0c8a0 rank {rank} nranks {ranks} cudaDev {rank % 8} "
        f"nvmlDev {rank % 8} busId {rank % 8}1000 commId 0x5e1f2a3b4c5d6e7f - Init COMPLETE"
    )
    body = "\n".join(head).encode() + b"\n"
    out = [body]
    total, op = len(body), 0
    while total < size:
        lines = []
        for _ in range(200):
            lines.append(
                f"{p}AllReduce: opCount {op:x} sendbuff 0x7f3a4c000000 recvbuff 0x7f3a4c000000 "
                f"count 1048576 datatype 7 op 0 root 0 comm 0x55d0c8a0 [nranks={ranks}] "
                "stream 0x55d0c9b0"
            )
            op += 1
        if op % 2000 == 0:
            lines.append(
                f"\n{host}:{pid}:{pid + 7} [{rank % 8}] transport/net_ib.cc:1296 NCCL WARN "
                "NET/IB : Got completion from peer 10.0.3.4<40000> with error 12, opcode 0, "
                "len 0, vendor err 129 (Recv)"
            )
            lines.append(f"{p}transport/net.cc:1386 -> 6")
        block = ("\n".join(lines) + "\n").encode()
        out.append(block)
        total += len(block)
    return b"".join(out)


def stderr_log(rank: int) -> bytes:
    seq = 4242 if rank != 13 else 4241  # rank 13 never enqueued #4242
    lines = [f"[rank{rank}]:[W1201 10:00:00.000000 Utils.hpp:137] Warning: a deprecation"]
    lines += [f"[rank{rank}]: step {i} loss 2.{i:04d}" for i in range(200)]
    if rank != 13:
        lines.append(
            f"[rank{rank}]:[E1201 10:30:00.1 ProcessGroupNCCL.cpp:689] [Rank {rank}] Watchdog "
            "caught collective operation timeout: WorkNCCL(SeqNum=4242, OpType=ALLREDUCE, "
            "NumelIn=1048576, NumelOut=1048576, Timeout(ms)=600000) ran for 600012 milliseconds "
            "before timing out."
        )
    lines.append(
        f"[rank{rank}]:[E1201 10:30:00.2 ProcessGroupNCCL.cpp:2303] [PG ID 0 PG GUID 0(default_pg) "
        f"Rank {rank}]  failure detected by watchdog at work sequence id: {seq} PG status: "
        f"last enqueued work: {seq}, last completed work: 4241"
    )
    return ("\n".join(lines) + "\n").encode()


def write_logs(root: Path, ranks: int, megabytes: int) -> list[Path]:
    per_rank = (megabytes << 20) // ranks + 1
    (root / "nccl").mkdir()
    files = []
    for rank in range(ranks):
        path = root / "nccl" / f"node{rank // 8:03d}.{10000 + rank}.log"
        path.write_bytes(nccl_log(rank, ranks, per_rank))
        stderr = root / "ranks" / str(rank) / "stderr.log"
        stderr.parent.mkdir(parents=True)
        stderr.write_bytes(stderr_log(rank))
        files += [path, stderr]
    return files


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", type=int, default=256)
    parser.add_argument("--mb", type=int, default=256)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="mldebug-bench-nccl-"))
    try:
        print(f"writing {args.ranks} ranks' logs ({args.mb} MB) to {root} ...", flush=True)
        files = write_logs(root, args.ranks, args.mb)
        size = sum(f.stat().st_size for f in files)
        mb = size / (1 << 20)
        first_core = sorted(os.sched_getaffinity(0))[0] if hasattr(os, "sched_getaffinity") else 0
        for f in files:  # read once so both readers find the files in the page cache
            f.read_bytes()

        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run(
            ["taskset", "-c", str(first_core), "grep", "-c", "NCCL WARN", *map(str, files)],
            capture_output=True,
            text=True,
        )
        grep_s = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        grep_cpu = (after.ru_utime + after.ru_stime) - (children.ru_utime + children.ru_stime)
        warn_lines = sum(int(line.rsplit(":", 1)[1]) for line in done.stdout.splitlines())

        # mldebug's side in a fresh process: its peak RSS after the imports, then after
        # reading every file, is the memory the reading itself took.
        code = (
            "import json, resource, sys, time\n"
            "from mldebug.nccl import compare, ranklog\n"
            "from mldebug.nccl.logparse import parse_file\n"
            "rss = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
            "files = sys.argv[1:]\n"
            "before, start, cpu = rss(), time.perf_counter(), time.process_time()\n"
            "procs = [p for f in files for p in parse_file(f).procs]\n"
            "logs = ranklog.ranks_of(procs)\n"
            "found = compare.compare(logs)\n"
            "took, cpu = time.perf_counter() - start, time.process_time() - cpu\n"
            "print(json.dumps({'s': took, 'cpu': cpu, 'growth_kb': rss() - before,"
            " 'ranks': len(logs),"
            " 'findings': [f.kind + ': ' + f.summary[:140] for f in found]}))\n"
        )
        done = subprocess.run(
            ["taskset", "-c", str(first_core), sys.executable, "-c", code, *map(str, files)],
            capture_output=True,
            text=True,
            check=True,
            cwd=Path(__file__).resolve().parent.parent,
        )
        result = json.loads(done.stdout)
        parse_s, cpu_s, growth = result["s"], result["cpu"], result["growth_kb"]
        findings = result["findings"]

        print(
            f"files: {len(files)}, {mb:.0f} MB, {args.ranks} ranks; load average {os.getloadavg()[0]:.1f}"
        )
        print(
            f"grep -c 'NCCL WARN':  wall {grep_s:6.2f} s {mb / grep_s:6.0f} MB/s   "
            f"CPU {grep_cpu:6.2f} s {mb / max(grep_cpu, 1e-9):6.0f} MB/s  ({warn_lines} lines)"
        )
        print(
            f"mldebug nccl parser:  wall {parse_s:6.2f} s {mb / parse_s:6.0f} MB/s   "
            f"CPU {cpu_s:6.2f} s {mb / cpu_s:6.0f} MB/s  on one core, peak RSS "
            f"+{growth / 1024:.1f} MB, {result['ranks']} ranks, {len(findings)} findings"
        )
        for finding in findings[:4]:
            print(f"  {finding}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
