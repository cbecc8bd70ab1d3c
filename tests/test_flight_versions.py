"""Flight Recorder dumps of other formats than torch 2.13's: format 2.4 (torch 2.5, NCCL,
`nccl_trace_rank_` files), 2.7 (`nccl_version`, host names in file names, subgroups), and
op names no torch wrote. Assembled from the documented format by
tests/data/flight/versions/make.py (this machine's torch writes only format 2.10)."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from mldebug.flight import compare_flight_dumps, read_flight_dump
from mldebug.flight.read import rank_from_name

DATA = Path(__file__).parent / "data" / "flight" / "versions"


def dumps(folder: str, pattern: str = "*") -> list:
    return [read_flight_dump(str(p)) for p in sorted((DATA / folder).glob(pattern))]


def test_format_2_4_pickle_and_json_read_alike():
    pickles = dumps("v2.4", "nccl_trace_rank_?")
    jsons = dumps("v2.4", "*.json")
    for a, b in zip(pickles, jsons, strict=True):
        assert (a.rank, a.version, len(a.entries)) == (b.rank, b.version, len(b.entries))
        assert (
            [e.op for e in a.entries]
            == [e.op for e in b.entries]
            == ["all_reduce"] * len(a.entries)
        )
        assert a.groups[0].last_completed == b.groups[0].last_completed == 2
    (finding,) = compare_flight_dumps(pickles)
    assert finding.kind == "outlier" and finding.ranks == (1,)


def test_format_2_7_nccl_version_host_names_and_subgroups():
    found = dumps("v2.7")
    assert [d.rank for d in found] == [0, 1, 2, 3]
    assert {d.comm_lib_version for d in found} == {"2.21.5"}
    # a rank's dump keeps the world and its own subgroup, not the other one
    assert {g.name for g in found[0].groups} == {"0", "1"}
    assert {g.name for g in found[1].groups} == {"0", "2"}
    (finding,) = compare_flight_dumps(found)
    assert finding.ranks == (2,) and "never called all_gather #2 on group 1" in finding.summary


@pytest.mark.parametrize(
    "name,rank",
    [
        ("comm_lib_trace_rank_3", 3),
        ("fr_node-a07_rank_1.pickle", 1),
        ("trace_rank_3_node12.json", 3),
        ("node12-rank-5", 5),
        ("nccl_trace_rank_7", 7),
        ("gpu-node", None),
    ],
)
def test_rank_from_file_names_with_host_names(name, rank):
    assert rank_from_name(name) == rank


def test_unknown_op_names_degrade_and_the_mismatch_is_still_found():
    found = dumps("unknown_ops")
    ops = [e.op for e in found[0].entries]
    assert ops == [
        "fancy_new_collective",
        "all_reduce_coalesced_v9",
        "fancy_new_collective",
        "123",
        "?",
    ]
    assert found[0].entries[0].backend == "xccl"
    (finding,) = compare_flight_dumps(found)
    assert finding.kind == "mismatch" and finding.ranks == (2,)


def test_a_bare_process_group_name_is_read(tmp_path):
    raw = pickle.loads((DATA / "v2.4" / "nccl_trace_rank_0").read_bytes())
    for entry in raw["entries"]:
        entry["process_group"] = "0"
    path = tmp_path / "rank_0"
    path.write_bytes(pickle.dumps(raw, protocol=2))
    dump = read_flight_dump(str(path))
    assert len(dump.entries) == 3 and dump.entries[0].group == "0"


def _all_dumps() -> list[Path]:
    root = DATA.parent
    gpu = root.parent / "gpu"
    paths = [p for p in root.rglob("*") if p.is_file() and p.suffix not in (".py", ".md")]
    paths += [gpu / "nccl_ok" / "fr_dump.pickle", gpu / "nccl_timeout" / "nccl_trace_rank_0"]
    return sorted(p for p in paths if p.exists())


@pytest.mark.parametrize("path", _all_dumps(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_column_reader_reads_what_the_entry_reader_reads(path, monkeypatch):
    # GIVEN a dump read the fast way (columns) and the checked way (entry by entry)
    fast = read_flight_dump(str(path))
    monkeypatch.setattr("mldebug.flight.read.fast_entries", lambda *args: None)
    slow = read_flight_dump(str(path))
    # THEN both say the same
    assert fast == slow


@pytest.mark.parametrize(
    "change",
    [
        {"state": 5},
        {"is_p2p": True, "p2p_seq_id": 1},
        {"collective_seq_id": "7"},
        {"process_group": ["0", "default_pg"]},
        {"input_dtypes": [["Float"]]},
        {"frames": "not frames"},
        {"time_created_ns": 1 << 70},
        {"profiling_name": None},
    ],
)
def test_odd_entries_read_alike_both_ways(change, tmp_path, monkeypatch):
    raw = pickle.loads((DATA / "v2.4" / "nccl_trace_rank_0").read_bytes())
    raw["entries"][1].update(change)
    path = tmp_path / "rank_0"
    path.write_bytes(pickle.dumps(raw, protocol=2))
    fast = read_flight_dump(str(path))
    monkeypatch.setattr("mldebug.flight.read.fast_entries", lambda *args: None)
    assert fast == read_flight_dump(str(path))
