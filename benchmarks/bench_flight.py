"""What does reading Flight Recorder dumps safely cost, next to a plain `pickle.load`?

N ranks' dumps of E entries each (torch's full default ring: 2,000, stacks included) are
made from a real gloo dump of torch 2.13 (tests/data/flight/behind/comm_lib_trace_rank_0):
its first entry repeated with growing sequence numbers, pickled with protocol 2 as torch
does; the last rank stops one collective early. Then, in the same run, on one core:
  * plain: `pickle.load` of every file (what torch's own analyser does; it runs what a
    file asks);
  * mldebug: `read_flight_dump` of every file (the unpickler of plain data only, checks
    and caps, the gloo quirk repair) and `compare_flight_dumps` over all of them.

  * mldebug with workers: `read_flight_dumps` (nccl/flight_pool.py) over the same files.

    python benchmarks/bench_flight.py [--ranks 64] [--entries 2000] [--repeats 3] [--workers N]
"""

from __future__ import annotations

import argparse
import io
import os
import pickle
import resource
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mldebug.nccl.flight import compare_flight_dumps, read_flight_dump  # noqa: E402
from mldebug.nccl.flight_pool import read_flight_dumps, worker_count  # noqa: E402
from mldebug.nccl.flight_read import _PlainUnpickler  # noqa: E402

SOURCE = ROOT / "tests" / "data" / "flight" / "behind" / "comm_lib_trace_rank_0"


def _entry(template: dict, seq: int, retired: bool) -> dict:
    """One entry as torch pickles it: its own lists and tuples (torch builds them per entry),
    the strings and the frame dicts shared (torch's pickler memoises them)."""
    entry = dict(template, collective_seq_id=seq, record_id=seq - 1, retired=retired)
    for key in ("input_sizes", "output_sizes"):
        entry[key] = [list(shape) for shape in template[key]]
    for key in ("input_dtypes", "output_dtypes", "frames"):
        entry[key] = list(template[key])
    entry["process_group"] = tuple(list(template["process_group"]))
    entry["time_created_ns"] = template["time_created_ns"] + seq * 1_000_000
    return entry


def make_dumps(folder: Path, ranks: int, entries: int) -> int:
    raw = _PlainUnpickler(io.BytesIO(SOURCE.read_bytes())).load()
    template = raw["entries"][0]
    total = 0
    for rank in range(ranks):
        count = entries - (1 if rank == ranks - 1 else 0)
        ring = [_entry(template, seq, seq < entries) for seq in range(1, count + 1)]
        status = {"0": {"last_enqueued_collective": count, "last_completed_collective": 0}}
        data = pickle.dumps(dict(raw, entries=ring, pg_status=status), protocol=2)
        (folder / f"comm_lib_trace_rank_{rank}").write_bytes(data)
        total += len(data)
    return total


def best_of(repeats: int, work) -> tuple[float, float]:
    """The best wall time and the best CPU time of this process over `repeats` runs (the
    machine may be shared: CPU time is what the work itself cost)."""
    walls, cpus = [], []
    for _ in range(repeats):
        start, cpu = time.perf_counter(), time.process_time()
        work()
        walls.append(time.perf_counter() - start)
        cpus.append(time.process_time() - cpu)
    return min(walls), min(cpus)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--entries", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--workers", type=int, default=0, help="reader processes (default: by cores, at least 2)"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        size = make_dumps(folder, args.ranks, args.entries)
        files = sorted(folder.iterdir())

        def plain():
            for path in files:
                with open(path, "rb") as handle:
                    pickle.load(handle)

        findings: list = []
        dumps: list = []

        def read():
            dumps[:] = [read_flight_dump(str(p)) for p in files]

        workers = args.workers or max(2, worker_count(len(files)))

        def pooled():
            read_flight_dumps([str(p) for p in files], workers=workers)

        def compare():
            findings[:] = compare_flight_dumps(dumps)

        plain_s = best_of(args.repeats, plain)
        rss_plain = peak_rss_mb()
        read_s = best_of(args.repeats, read)
        compare_s = best_of(args.repeats, compare)
        pooled_s = best_of(args.repeats, pooled)
        rss_ours = peak_rss_mb()
    mb = size / 1e6
    load = os.getloadavg()[0]
    print(f"{args.ranks} dumps x {args.entries} entries, {mb:.1f} MB, best of {args.repeats}")
    print(f"load average {load:.1f}; {os.cpu_count()} CPUs")
    print(f"{'':28} {'wall s':>8} {'CPU s':>8} {'MB/s CPU':>9}")
    rows = [
        ("plain pickle.load", plain_s),
        ("mldebug read", read_s),
        ("mldebug compare", compare_s),
    ]
    rows.append(("mldebug read + compare", (read_s[0] + compare_s[0], read_s[1] + compare_s[1])))
    rows.append((f"mldebug read, {workers} workers", pooled_s))
    for label, (wall, cpu) in rows:
        print(f"{label:28} {wall:8.3f} {cpu:8.3f} {mb / max(cpu, 1e-9):9.1f}")
    print("(the workers' CPU time is theirs: the CPU column of that row is the parent's only)")
    ours = read_s[1] + compare_s[1]
    print(
        f"ratio (CPU): read {read_s[1] / plain_s[1]:.1f}x, read + compare "
        f"{ours / plain_s[1]:.1f}x; peak RSS {rss_plain:.0f} MB after plain, "
        f"{rss_ours:.0f} MB after mldebug (all dumps held)"
    )
    print(f"findings: {[f.summary for f in findings]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
