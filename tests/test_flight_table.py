"""The column tables (flight/table.py) and what is built on them say what the entries
say: the comparison of lanes shared across ranks (flight_lanes.py), the ledger reading
only the numbers where calls differ (flight_compare._trimmed), and who entered each
collective last (flight_arrivals.py), each against the entry-by-entry way.

Data: the real gloo dumps of torch 2.13 under tests/data/flight*/ (recorded by their
record.py), NCCL dumps recorded on an H200 (tests/data/gpu/), and rings assembled from one of their entries (tests/data/flight/size, rank 0)
in torch's format: per entry its own lists, strings and frames shared, as torch pickles.
"""

from __future__ import annotations

import pickle
from dataclasses import replace
from pathlib import Path

import pytest

import mldebug.flight.compare as flight_compare
from mldebug.flight import compare_flight_dumps, read_flight_dump
from mldebug.flight.arrivals import entry_order_columns
from mldebug.flight.table import EntryTable
from mldebug.flight.timing import entry_order

DATA = Path(__file__).parent / "data"
SETS = sorted(
    p
    for root in ("flight", "flight_timing")
    for p in (DATA / root).iterdir()
    if p.is_dir() and any(f.name.startswith("comm_lib_trace_rank_") for f in p.iterdir())
)
TEMPLATE = DATA / "flight" / "size" / "comm_lib_trace_rank_0"


GPU = [
    DATA / "gpu" / "nccl_ok" / "fr_dump.pickle",
    DATA / "gpu" / "nccl_timeout" / "nccl_trace_rank_0",
]


@pytest.mark.parametrize("path", GPU, ids=lambda p: p.parent.name)
def test_recorded_nccl_dumps_compare_alike_as_tables_and_as_entries(path):
    # NCCL dumps recorded on an H200 (tests/data/gpu): completed and started states
    dumps = _read([path])
    assert isinstance(dumps[0].entries, EntryTable)
    assert _summaries(dumps) == _summaries(_plain(dumps))


def _read(paths: list[Path]) -> list:
    return [read_flight_dump(str(p)) for p in paths]


def _plain(dumps: list) -> list:
    """The same dumps with their entries as plain tuples (the entry-by-entry way)."""
    return [replace(d, entries=tuple(d.entries)) for d in dumps]


def _summaries(dumps: list) -> list[tuple]:
    return [(f.kind, f.ranks, f.summary, f.detail) for f in compare_flight_dumps(dumps)]


@pytest.mark.parametrize("folder", SETS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_recorded_dumps_compare_alike_as_tables_and_as_entries(folder):
    dumps = _read(sorted(folder.glob("comm_lib_trace_rank_*")))
    assert any(isinstance(d.entries, EntryTable) for d in dumps)
    assert _summaries(dumps) == _summaries(_plain(dumps))


def _ring(rank: int, count: int, odd: dict[int, list[int]], groups: bool) -> dict:
    raw = pickle.loads(TEMPLATE.read_bytes())
    template = raw["entries"][0]
    ring = []
    for seq in range(1, count + 1):
        op = "gloo:all_reduce" if seq % 3 else "gloo:broadcast"
        size = odd.get(seq, [4 if seq % 3 else 8])
        entry = dict(template, collective_seq_id=seq, record_id=seq - 1, profiling_name=op)
        entry.update(
            input_sizes=[list(size)],
            output_sizes=[list(size)],
            input_dtypes=["Float"],
            output_dtypes=["Float"],
            frames=list(template["frames"]),
            process_group=("0", "default_pg"),
            retired=False,
            state="scheduled",
            time_created_ns=template["time_created_ns"] + seq * 10**6 + rank * 1000,
        )
        ring.append(entry)
        if groups and seq % 4 == 0:  # a subgroup's collectives between the default group's
            sub = dict(entry, process_group=("1", "sub"), pg_id=1, collective_seq_id=seq // 4)
            ring.append(sub)
    status = {"0": {"last_enqueued_collective": count, "last_completed_collective": count - 2}}
    return dict(raw, entries=ring, pg_status=status, pg_config={})


@pytest.mark.parametrize("groups", [False, True], ids=["one group", "two groups"])
def test_assembled_rings_with_a_mismatch_and_a_rank_behind_compare_alike(tmp_path, groups):
    # GIVEN 8 ranks: rank 5 passes other sizes at #39, rank 7 stops at #38 of 40
    paths = []
    for rank in range(8):
        odd = {39: [16]} if rank == 5 else {}
        raw = _ring(rank, 38 if rank == 7 else 40, odd, groups)
        path = tmp_path / f"comm_lib_trace_rank_{rank}"
        path.write_bytes(pickle.dumps(raw, protocol=2))
        paths.append(path)
    dumps = _read(paths)
    assert all(isinstance(d.entries, EntryTable) for d in dumps)
    found = _summaries(dumps)
    # THEN the tables, the plain entries and the untrimmed ledger say the same
    assert found == _summaries(_plain(dumps))
    saved = flight_compare.MAX_DISTINCT
    flight_compare.MAX_DISTINCT = -1  # every lane read whole by the ledger
    try:
        assert found == _summaries(dumps)
    finally:
        flight_compare.MAX_DISTINCT = saved
    assert any(ranks == (5,) and "#39" in text for _, ranks, text, _ in found)
    assert any(ranks == (7,) for _, ranks, _, _ in found)


@pytest.mark.parametrize("folder", sorted((DATA / "flight_timing").glob("[a-z]*[!.py]")))
def test_who_entered_last_reads_alike_from_the_columns(folder):
    dumps = _read(sorted(folder.glob("comm_lib_trace_rank_*")))
    fast = entry_order_columns(dumps)
    assert fast is not None and fast
    assert fast == entry_order(_plain(dumps))


def test_who_entered_last_leaves_an_unusual_set_to_the_entries():
    dumps = _read(sorted((DATA / "flight_timing" / "slow").glob("comm_lib_trace_rank_*")))
    assert entry_order_columns(dumps + dumps[:1]) is None  # two dumps of one rank
    assert entry_order_columns(_plain(dumps)) is None


def test_a_table_reads_as_its_entries():
    (dump,) = _read([TEMPLATE])
    table = dump.entries
    assert isinstance(table, EntryTable)
    entries = tuple(table)
    assert table[0] == entries[0] and table[-1] == entries[-1] and table[1:3] == entries[1:3]
    assert table == entries and len(table) == len(entries)
    with pytest.raises(IndexError):
        table[len(entries)]
