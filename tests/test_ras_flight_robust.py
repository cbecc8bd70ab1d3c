"""Property-based (hypothesis): RAS answers cut anywhere or with lines shuffled and mangled
never raise anything but RasError; Flight Recorder rings of any plain data read the same by
columns as entry by entry (the column reader is a shortcut, never another answer)."""

from __future__ import annotations

import pickle
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from mldebug.flight import read_flight_dump
from mldebug.ras.read import RasError, parse_ras
from mldebug.ras.verdict import ras_findings

RAS = sorted((Path(__file__).parent / "data" / "ras").glob("*_*.*"))
TEXTS = [p.read_bytes() for p in RAS]


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(TEXTS), st.integers(0, 4000), st.binary(max_size=40))
def test_ras_cut_anywhere_or_with_garbage(text, cut, garbage):
    data = text[:cut] + garbage + text[cut:]
    try:
        report = parse_ras(data, "x")
    except RasError as error:
        assert "\n" not in str(error)
    else:
        ras_findings([report])  # the verdict takes whatever the reader gave


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(TEXTS), st.lists(st.integers(0, 200), max_size=12), st.randoms())
def test_ras_lines_shuffled_and_dropped(text, drops, rnd):
    lines = text.split(b"\n")
    head, rest = lines[:1], [line for i, line in enumerate(lines[1:]) if i not in drops]
    rnd.shuffle(rest)
    try:
        ras_findings([parse_ras(b"\n".join(head + rest), "x")])
    except RasError:
        pass


plain = st.recursive(
    st.none() | st.booleans() | st.integers(-(1 << 65), 1 << 65) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.tuples(inner, inner),
    max_leaves=6,
)
field = st.sampled_from(
    [
        "process_group",
        "profiling_name",
        "collective_seq_id",
        "is_p2p",
        "state",
        "retired",
        "input_sizes",
        "input_dtypes",
        "frames",
        "time_created_ns",
        "pg_id",
    ]
)
GOOD = {
    "process_group": ("0", "default_pg"),
    "pg_id": 0,
    "profiling_name": "gloo:all_reduce",
    "collective_seq_id": 1,
    "p2p_seq_id": 0,
    "is_p2p": False,
    "state": "completed",
    "retired": True,
    "input_sizes": [[4]],
    "output_sizes": [[4]],
    "input_dtypes": ["Float"],
    "output_dtypes": ["Float"],
    "time_created_ns": 1,
    "timeout_ms": 1000,
    "record_id": 0,
    "frames": [{"name": "f", "filename": "/p/train.py", "line": 3}],
}


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.lists(st.dictionaries(field, plain, max_size=3), min_size=1, max_size=6))
@example(rows=[{}, {"time_created_ns": True}])  # True == 1: a column of one number, wrongly
@example(rows=[{}, {"pg_id": False}])  # and False == 0
def test_any_plain_ring_reads_alike_both_ways(rows):
    entries = []
    for i, change in enumerate(rows):
        entries.append(dict(GOOD, collective_seq_id=i + 1))
        entries[-1].update(change)
    folder = Path(tempfile.mkdtemp())
    path = folder / "rank_0"
    path.write_bytes(pickle.dumps({"version": "2.10", "entries": entries, "pg_config": {}}))
    fast = read_flight_dump(str(path))
    import mldebug.flight.read as reader

    saved = reader.fast_entries
    reader.fast_entries = lambda *args: None  # type: ignore[assignment]
    try:
        slow = read_flight_dump(str(path))
    finally:
        reader.fast_entries = saved
    shutil.rmtree(folder)
    assert fast == slow
