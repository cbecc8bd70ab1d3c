"""How fast `mldebug nccl` reads NCCL debug logs, beside `grep -c` on the same files.

Writes 256 synthetic per-rank logs (one `NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,COLL` file
per rank, as `mldebug run --nccl-debug INFO` leaves them in <run>/nccl/, made of the line
shapes NCCL 2.28 writes: init, channels, trees, one line per collective, a few WARNs) and
each rank's stderr with torch's watchdog messages, at least 256 MB in all, into a temporary
directory. Then, in one run: `grep -c "NCCL WARN"` over every file (the plain alternative,
one process, all the files), and mldebug's parser over the same files on one core in this
process, with the growth of its peak RSS.

    python benchmarks/bench_nccl.py [--ranks 256] [--mb 256]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mldebug.nccl import compare  # noqa: E402
from mldebug.nccl.logparse import parse_file  # noqa: E402


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
        if op % 20000 == 0:
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


def peak_rss_kb() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", type=int, default=256)
    parser.add_argument("--mb", type=int, default=256)
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core
    root = Path(tempfile.mkdtemp(prefix="mldebug-bench-nccl-"))
    try:
        print(f"writing {args.ranks} ranks' logs ({args.mb} MB) to {root} ...", flush=True)
        files = write_logs(root, args.ranks, args.mb)
        size = sum(f.stat().st_size for f in files)
        mb = size / (1 << 20)
        for f in files:  # read once so both readers find the files in the page cache
            f.read_bytes()

        start = time.perf_counter()
        done = subprocess.run(
            ["grep", "-c", "NCCL WARN", *map(str, files)], capture_output=True, text=True
        )
        grep_s = time.perf_counter() - start
        warn_lines = sum(int(line.rsplit(":", 1)[1]) for line in done.stdout.splitlines())

        before = peak_rss_kb()
        start = time.perf_counter()
        procs = []
        for f in files:
            procs += parse_file(str(f)).procs
        logs = compare.ranks_of(procs)
        findings = compare.compare(logs)
        parse_s = time.perf_counter() - start
        growth = peak_rss_kb() - before

        print(f"files: {len(files)}, {mb:.0f} MB, {args.ranks} ranks")
        print(
            f"grep -c 'NCCL WARN':  {grep_s:6.2f} s  {mb / grep_s:7.0f} MB/s  ({warn_lines} lines)"
        )
        print(
            f"mldebug nccl parser:  {parse_s:6.2f} s  {mb / parse_s:7.0f} MB/s on one core, "
            f"peak RSS +{growth / 1024:.1f} MB, {len(logs)} ranks, {len(findings)} findings"
        )
        for finding in findings[:4]:
            print(f"  {finding.kind}: {finding.summary[:150]}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
