"""What does reading Flight Recorder dumps safely cost, next to a plain `pickle.load`?

N ranks' dumps of E entries each (torch's full default ring: 2,000, stacks included) are
made from a real gloo dump of torch 2.13 (tests/data/flight/behind/comm_lib_trace_rank_0):
its first entry repeated with growing sequence numbers, pickled with protocol 2 as torch
does; the last rank stops one collective early. Then, in the same run, on one core:
  * plain: `pickle.load` of every file (what torch's own analyser does; it runs what a
    file asks);
  * mldebug: `read_flight_dump` of every file (the unpickler of plain data only, checks
    and caps, the gloo quirk repair) into column tables, then `compare_flight_dumps`;
  * the same with worker processes: `read_flight_dumps` (flight/pool.py);
  * what `dump --run` does with a run's fr/: `scan_run`, bounded by RUN_FR_SECONDS.
Each runs in its own forked process: its wall and CPU time (its workers' included) and the
peak memory it added are printed side by side.

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

from mldebug.flight import compare_flight_dumps, read_flight_dump  # noqa: E402
from mldebug.flight.pool import read_flight_dumps, worker_count  # noqa: E402
from mldebug.flight.read import _PlainUnpickler  # noqa: E402
from mldebug.model import KIND_FR_UNREAD  # noqa: E402
from mldebug.nccl.scan import RUN_FR_SECONDS, scan_run  # noqa: E402

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


def _rss_mb() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def _measured(work, out) -> None:
    """In a forked child: run `work`, send (wall, CPU of it and of its own workers, peak
    RSS above the child's start in MB, what work returned)."""
    base = _rss_mb()
    start, cpu = time.perf_counter(), time.process_time()
    result = work()
    wall = time.perf_counter() - start
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    spent = time.process_time() - cpu + children.ru_utime + children.ru_stime
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - base
    out.write(pickle.dumps((wall, spent, peak, result)))


def measure(repeats: int, work) -> tuple[float, float, float, object]:
    """The best wall and CPU time over `repeats` runs, each in a fresh forked process (the
    machine may be shared: CPU time is what the work cost, its workers' included), and the
    largest peak memory it added."""
    runs = []
    for _ in range(repeats):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            with os.fdopen(write, "wb") as out:
                _measured(work, out)
            os._exit(0)
        os.close(write)
        with os.fdopen(read, "rb") as handle:
            data = handle.read()
        os.waitpid(pid, 0)
        runs.append(pickle.loads(data))
    wall = min(r[0] for r in runs)
    cpu = min(r[1] for r in runs)
    return wall, cpu, max(r[2] for r in runs), runs[-1][3]


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
        folder = Path(tmp) / "fr"  # as in a run directory: what `dump --run` reads
        folder.mkdir()
        size = make_dumps(folder, args.ranks, args.entries)
        files = [str(p) for p in sorted(folder.iterdir())]
        workers = args.workers or max(2, worker_count(len(files)))

        def plain():
            for path in files:
                with open(path, "rb") as handle:
                    pickle.load(handle)

        def read():
            for path in files:
                read_flight_dump(path)

        def read_compare():
            dumps = [read_flight_dump(path) for path in files]
            return [f.summary for f in compare_flight_dumps(dumps)]

        def pooled():
            dumps, _, _ = read_flight_dumps(files, workers=workers)
            return [f.summary for f in compare_flight_dumps(dumps)]

        def bounded():  # `dump --run`'s read of the run's fr/, within RUN_FR_SECONDS
            found = scan_run(tmp)
            unread = [f.summary for f in found.findings if f.kind == KIND_FR_UNREAD]
            return len(found.dumps), unread

        rows = [
            ("plain pickle.load", measure(args.repeats, plain)),
            ("mldebug read", measure(args.repeats, read)),
            ("mldebug read + compare", measure(args.repeats, read_compare)),
            (f"  the same, {workers} workers", measure(args.repeats, pooled)),
            ("dump --run's read of fr/", measure(1, bounded)),
        ]
    mb = size / 1e6
    print(f"{args.ranks} dumps x {args.entries} entries, {mb:.1f} MB, best of {args.repeats}")
    print(f"load average {os.getloadavg()[0]:.1f}; {os.cpu_count()} CPUs")
    print(f"{'':28} {'wall s':>8} {'CPU s':>8} {'x plain':>8} {'peak MB':>8}")
    plain_cpu = rows[0][1][1]
    for label, (wall, cpu, peak, _) in rows:
        print(f"{label:28} {wall:8.3f} {cpu:8.3f} {cpu / plain_cpu:8.2f} {peak:8.0f}")
    print("(CPU: the process's and its workers'; peak: memory added, the dumps' tables held)")
    read, unread = rows[4][1][3]  # type: ignore[misc]
    print(
        f"dump --run read {read} of {len(files)} dumps within its {RUN_FR_SECONDS:g} s bound"
        + (f"; it said: {unread[0]}" if unread else "; none left unread")
    )
    same = rows[2][1][3] == rows[3][1][3]
    print(f"findings ({'the same' if same else 'NOT the same'} with workers): {rows[2][1][3]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
