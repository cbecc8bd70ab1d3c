"""`mldebug nccl` reads a folder of Flight Recorder dumps the way the benchmarks time it:
all dumps at once through the worker-process reader (flight/pool.py), each dump's
summary counted while it is read (flight/summary.py), so the report never walks the
entries again. The counts must say what walking the entries says, for every recorded dump.
Dumps: torch 2.13's real gloo and NCCL dumps in tests/data (see their READMEs)."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from mldebug.commands import nccl as nccl_command
from mldebug.flight import pool as flight_pool
from mldebug.flight import read_flight_dump, summarize_flight_dump
from mldebug.flight.summary import tally_entries
from mldebug.flight.table import EntryTable
from mldebug.nccl.scan import scan_paths

DATA = Path(__file__).parent / "data"
FLIGHT = DATA / "flight"
REAL_FILES = sorted(
    [*FLIGHT.glob("*/comm_lib_trace_rank_*"), *FLIGHT.glob("*/json/comm_lib_trace_rank_*")]
    + [DATA / "gpu" / "nccl_ok" / "fr_dump.pickle"]
    + [DATA / "gpu" / "nccl_timeout" / "nccl_trace_rank_0"]
    + list((DATA / "agent").glob("fr_gloo_rank*.json"))
)


class NotWalked(tuple):
    """Entries that refuse to be walked: the report must not need them."""

    def __iter__(self):
        raise AssertionError("the entries were walked again")

    def __getitem__(self, index):
        raise AssertionError("the entries were read again")


@pytest.mark.parametrize("path", REAL_FILES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_counts_made_while_reading_say_what_walking_the_entries_says(path):
    dump = read_flight_dump(str(path))
    assert dump.tally is not None
    assert dump.tally == tally_entries(tuple(dump.entries))  # a table and plain tuples alike
    walked = summarize_flight_dump(replace(dump, tally=None))  # the counts from the entries
    assert summarize_flight_dump(dump) == walked


def behind_folder(tmp_path: Path, count: int) -> Path:
    """`count` ranks of the recorded gloo job where rank 2 fell behind (ranks 0-2 as
    recorded, the rest copies of rank 0 under their own rank's name)."""
    folder = tmp_path / "fr"
    folder.mkdir()
    for rank in range(count):
        source = FLIGHT / "behind" / f"comm_lib_trace_rank_{min(rank, 2) if rank < 3 else 0}"
        shutil.copyfile(source, folder / f"comm_lib_trace_rank_{rank}")
    return folder


def test_nccl_on_a_folder_of_dumps_reads_them_with_worker_processes(tmp_path, monkeypatch, capsys):
    folder = behind_folder(tmp_path, 40)
    real_count, real_context = flight_pool.worker_count, flight_pool._context
    asked: list[list[str]] = []
    pools: list[object] = []
    real_read = flight_pool.read_flight_dumps

    def reading(paths, deadline=None, workers=None):
        asked.append(list(paths))
        return real_read(paths, deadline, workers)

    def context():
        pools.append(real_context())
        return pools[-1]

    # as on a machine of two cores, whatever this one has
    monkeypatch.setattr(flight_pool, "worker_count", lambda files: real_count(files, cores=2))
    monkeypatch.setattr(flight_pool, "_context", context)
    monkeypatch.setattr(flight_pool, "read_flight_dumps", reading)
    code = nccl_command.main(["--json", str(folder)])
    report = json.loads(capsys.readouterr().out)
    assert asked == [[str(folder / name) for name in sorted(p.name for p in folder.iterdir())]]
    assert len(pools) == 1  # one pool of worker processes read them all
    assert len(report["flight_dumps"]) == 40 and code == 1
    behind = [f for f in report["findings"] if f["kind"] == "outlier"]
    assert len(behind) == 1 and behind[0]["ranks"] == [2]  # the recorded rank that fell behind


def test_the_reports_do_not_walk_the_entries_again(tmp_path, monkeypatch):
    from mldebug.report.nccl import json_report, text_report

    folder = behind_folder(tmp_path, 3)
    (folder / "nccl_trace_rank_3").write_bytes(
        (DATA / "gpu" / "nccl_timeout" / "nccl_trace_rank_0").read_bytes()
    )
    scan = scan_paths([str(folder), str(FLIGHT / "p2p" / "json")])
    walked = [summarize_flight_dump(replace(d, tally=None)) for d in scan.dumps]
    assert len(walked) == 7 and any(isinstance(d.entries, EntryTable) for d in scan.dumps)
    scan.dumps = [replace(d, entries=NotWalked()) for d in scan.dumps]

    def refuse(self, positions=None):
        raise AssertionError("a column table was walked again")

    monkeypatch.setattr(EntryTable, "_columns", refuse)
    report = json_report(scan)
    assert [s["lines"] for s in report["flight_summaries"]] == walked
    text = text_report(scan, verbose=True)
    assert all(line.split(": Flight Recorder")[0] in text for line, *_ in walked)
