"""How much memory and time reading a large torch.profiler trace takes, beside `json.load`.

    python benchmarks/bench_trace.py [--events N]

Builds a large trace from a recorded one (tests/data/traces/balanced/rank0: its events
repeated, shifted in time, until N events; default 1,000,000, about 300 MB of JSON) and
writes it plain and gzipped to a temporary folder. Each reader runs in a fresh process, so
its peak resident memory (ru_maxrss) is its own:

- mldebug: `mldebug.traces.read.read_rank` (the streaming reader, then the rank's split);
- plain: `json.load` of the same file (the events only, nothing computed from them).

Prints, per file, each one's seconds and peak memory in MiB.
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
SEED = HERE / "tests" / "data" / "traces" / "balanced" / "rank0.pt.trace.json.gz"

MLDEBUG = """
import resource, sys, time
sys.path.insert(0, sys.argv[2])
from mldebug.traces.read import read_rank
start = time.perf_counter()
trace, rank = read_rank(sys.argv[1])
took = time.perf_counter() - start
print(took, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, trace.events)
"""
PLAIN = """
import gzip, json, resource, sys, time
start = time.perf_counter()
opener = gzip.open if sys.argv[1].endswith(".gz") else open
with opener(sys.argv[1], "rt") as f:
    data = json.load(f)
took = time.perf_counter() - start
print(took, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, len(data["traceEvents"]))
"""
BASELINE = """
import resource
print(0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 0)
"""


def build(folder: Path, events: int) -> list[Path]:
    with gzip.open(SEED, "rt") as f:
        seed = json.load(f)
    timed = [e for e in seed["traceEvents"] if e.get("ph") == "X" and "dur" in e]
    span = max(e["ts"] + e["dur"] for e in timed) - min(e["ts"] for e in timed)
    plain = folder / "big.pt.trace.json"
    head = {k: v for k, v in seed.items() if k != "traceEvents"}
    with open(plain, "w") as out:
        out.write(json.dumps(head)[:-1] + ', "traceEvents": [\n')
        written, shift = 0, 0.0
        while written < events:
            for event in timed:
                if written >= events:
                    break
                moved = dict(event, ts=event["ts"] + shift)
                out.write(("," if written else "") + json.dumps(moved) + "\n")
                written += 1
            shift += span
        out.write("]}\n")
    packed = folder / "big.pt.trace.json.gz"
    with open(plain, "rb") as src, gzip.open(packed, "wb", compresslevel=1) as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
    return [plain, packed]


def run(code: str, path: Path) -> tuple[float, float, int]:
    out = subprocess.run(
        [sys.executable, "-c", code, str(path), str(HERE)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return float(out[0]), float(out[1]), int(out[2])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    args = parser.parse_args()
    _, floor, _ = run(BASELINE, SEED)
    print(f"an empty interpreter's peak memory: {floor:.0f} MiB")
    with tempfile.TemporaryDirectory() as tmp:
        for path in build(Path(tmp), args.events):
            size = path.stat().st_size / (1 << 20)
            print(f"{path.name}: {size:.0f} MiB on disk")
            for name, code in (("mldebug read_rank", MLDEBUG), ("plain json.load", PLAIN)):
                took, peak, count = run(code, path)
                print(f"  {name:18} {took:6.1f} s  peak {peak:6.0f} MiB  ({count:,} events)")


if __name__ == "__main__":
    main()
