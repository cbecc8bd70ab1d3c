"""Reading and comparing torch's Flight Recorder dumps (mldebug/nccl/flight*.py).

Golden tests read real dumps only:
- tests/data/flight/{skipped,size,behind}/: 3-rank gloo jobs on torch 2.13 (CPU), recorded
  by tests/data/flight/record.py (pickle, and JSON under json/);
- tests/data/gpu/nccl_ok/fr_dump.pickle, tests/data/gpu/nccl_timeout/nccl_trace_rank_0:
  one NCCL rank on an H200 (tests/data/gpu/README.md);
- tests/data/agent/fr_gloo_rank*.json: a 2-rank gloo job of torch 2.13 where rank 0 made an
  all_reduce rank 1 skipped (tests/test_flight_recorder.py).
Hostile input is built here: a pickle that would call os.system, and hypothesis' garbage,
truncations and mutations of the real dumps.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mldebug.flight import (
    FlightDump,
    FlightDumpError,
    compare_flight_dumps,
    looks_like_flight_dump,
    read_flight_dump,
    summarize_flight_dump,
)
from mldebug.flight.read import MAX_BYTES
from mldebug.model import (
    KIND_FR_INCOMPLETE,
    KIND_MISMATCH,
    KIND_OUTLIER,
    SEVERITY_WARNING,
)

DATA = Path(__file__).parent / "data"
FLIGHT = DATA / "flight"
NCCL_OK = DATA / "gpu" / "nccl_ok" / "fr_dump.pickle"
NCCL_TIMEOUT = DATA / "gpu" / "nccl_timeout" / "nccl_trace_rank_0"
RECORD = "tests/data/flight/record.py"  # where the recorded entries were called
RECORD_LINES = (FLIGHT / "record.py").read_text().splitlines()
ALL_REDUCE_LINE = next(i for i, t in enumerate(RECORD_LINES, 1) if "dist.all_reduce(grad)" in t)
BROADCAST_LINE = next(i for i, t in enumerate(RECORD_LINES, 1) if "dist.broadcast(grad" in t)
REAL_FILES = sorted(
    [*FLIGHT.glob("*/comm_lib_trace_rank_*"), *FLIGHT.glob("*/json/comm_lib_trace_rank_*")]
    + [NCCL_OK, NCCL_TIMEOUT, *(DATA / "agent").glob("fr_gloo_rank*.json")]
)


def scenario(name: str, form: str = "") -> list[FlightDump]:
    folder = FLIGHT / name / form
    return [read_flight_dump(str(p)) for p in sorted(folder.glob("comm_lib_trace_rank_*"))]


def raw_pickle(path: Path) -> dict:
    """The recorded pickle as it is, read with the reader's own unpickler of plain data."""
    from mldebug.flight.read import _PlainUnpickler

    return _PlainUnpickler(io.BytesIO(path.read_bytes())).load()


# ---- the restricted unpickler ----------------------------------------------------------


class CallsSystem:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_a_pickle_that_would_call_a_function_is_refused_without_running_it(tmp_path, protocol):
    marker = tmp_path / "ran"
    hostile = {"version": "2.10", "pg_config": {}, "entries": [CallsSystem(marker)]}
    path = tmp_path / "comm_lib_trace_rank_0"
    path.write_bytes(pickle.dumps(hostile, protocol=protocol))
    with pytest.raises(FlightDumpError) as caught:
        read_flight_dump(str(path))
    assert not marker.exists()
    message = str(caught.value)
    assert "\n" not in message and "only plain data" in message and "system" in message


def test_a_pickle_of_any_class_is_refused_even_a_harmless_one(tmp_path):
    from collections import OrderedDict

    path = tmp_path / "rank_1"
    path.write_bytes(pickle.dumps({"version": "2.10", "entries": OrderedDict()}))
    with pytest.raises(FlightDumpError, match="collections.OrderedDict"):
        read_flight_dump(str(path))


def test_a_file_over_the_size_cap_is_not_read(tmp_path):
    path = tmp_path / "rank_0"
    with open(path, "wb") as handle:
        handle.write(b"\x80\x02")
        handle.truncate(MAX_BYTES + 1)
    with pytest.raises(FlightDumpError, match="MiB, not read"):
        read_flight_dump(str(path))


def test_a_symlink_a_fifo_or_a_missing_file_is_one_line_not_a_crash(tmp_path):
    (tmp_path / "link_0").symlink_to(NCCL_TIMEOUT)
    os.mkfifo(tmp_path / "fifo_1")
    for name in ("link_0", "fifo_1", "missing_2"):
        with pytest.raises(FlightDumpError, match="cannot read it"):
            read_flight_dump(str(tmp_path / name))


# ---- garbage never crashes it (hypothesis) ---------------------------------------------

REAL_BYTES = [p.read_bytes() for p in REAL_FILES]


def read_or_refuse(tmp_path: Path, data: bytes, name: str = "comm_lib_trace_rank_0") -> None:
    """Either a dump (then summary and comparison work on it too) or FlightDumpError."""
    path = tmp_path / name
    path.write_bytes(data)
    looks_like_flight_dump(str(path), data[:4096])
    try:
        dump = read_flight_dump(str(path))
    except FlightDumpError as error:
        assert "\n" not in str(error)
        return
    assert all(isinstance(line, str) for line in summarize_flight_dump(dump))
    compare_flight_dumps([dump, dump])


SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@SETTINGS
@given(st.binary(max_size=4096), st.sampled_from([b"", b"\x80\x02", b"\x80\x04", b"{"]))
def test_garbage_never_crashes_the_reader(tmp_path, data, start):
    read_or_refuse(tmp_path, start + data)


@SETTINGS
@given(st.integers(0, len(REAL_BYTES) - 1), st.data())
def test_real_dumps_cut_anywhere_never_crash_the_reader(tmp_path, which, data):
    real = REAL_BYTES[which]
    cut = data.draw(st.integers(0, len(real)))
    read_or_refuse(tmp_path, real[:cut])


@SETTINGS
@given(
    st.integers(0, len(REAL_BYTES) - 1),
    st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 255)), min_size=1, max_size=8),
)
def test_real_dumps_with_bytes_changed_never_crash_the_reader(tmp_path, which, changes):
    data = bytearray(REAL_BYTES[which])
    for offset, value in changes:
        data[offset % len(data)] = value
    read_or_refuse(tmp_path, bytes(data))


PLAIN = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.sampled_from([1 << 64, -(1 << 70)])
    | st.floats()
    | st.text(max_size=20)
    | st.binary(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=30,
)
ENTRY_KEYS = st.sampled_from(
    ["process_group", "collective_seq_id", "profiling_name", "input_sizes", "input_dtypes",
     "state", "retired", "is_p2p", "pg_id", "frames", "time_created_ns", "timeout_ms"]
)  # fmt: skip


@SETTINGS
@given(
    st.lists(st.dictionaries(ENTRY_KEYS, PLAIN, max_size=12), max_size=6),
    st.dictionaries(st.sampled_from(["pg_config", "pg_status", "version"]), PLAIN),
    st.booleans(),
)
def test_dumps_of_plain_data_in_any_shape_never_crash_it(tmp_path, entries, top, as_json):
    raw = {"entries": entries, **top}
    if as_json:
        data = json.dumps(raw, default=str).encode()
    else:
        data = pickle.dumps(raw, protocol=2)
    read_or_refuse(tmp_path, data)


def test_huge_numbers_where_text_or_counts_belong_never_crash_it(tmp_path):
    huge = 10**5000  # str() of it raises ValueError (4,300 digits at most)
    entry = {"process_group": (huge, "x"), "collective_seq_id": huge, "profiling_name": huge}
    entry.update(input_dtypes=[huge], input_sizes=[[huge]], time_created_ns=huge)
    raw = {"version": huge, "entries": [entry], "pg_config": {"a": {"name": huge}}}
    raw["pg_status"] = {huge: {"last_completed_collective": huge}}
    read_or_refuse(tmp_path, pickle.dumps(raw, protocol=2))


# ---- golden: the recorded gloo jobs ----------------------------------------------------


@pytest.mark.parametrize("form", ["", "json"])
def test_skipped_all_reduce_names_the_rank_that_did_not_join_it(form):
    (finding,) = compare_flight_dumps(scenario("skipped", form))
    assert finding.kind == KIND_MISMATCH and finding.recipe == "mismatched-collectives"
    assert finding.ranks == (2,)
    assert finding.summary.startswith(
        "ranks make different collectives as call #4, which never match: ranks 0-1 call all_reduce"
    )
    assert finding.summary.endswith(": rank 2 is the odd one out")
    (most, odd) = finding.parts
    assert most.ranks == (0, 1) and most.label.startswith("all_reduce #4 Float[4]")
    assert odd.ranks == (2,) and odd.label.startswith("broadcast #4 Float[4]")
    if form == "":  # the pickle keeps the stacks: where each side called it
        assert finding.location.endswith(f"{RECORD}:{BROADCAST_LINE}")
        assert most.location.endswith(f"{RECORD}:{ALL_REDUCE_LINE}")


@pytest.mark.parametrize("form", ["", "json"])
def test_size_mismatch_names_the_rank_and_both_sizes_and_nothing_after_it(form):
    (finding,) = compare_flight_dumps(scenario("size", form))
    assert finding.kind == KIND_MISMATCH and finding.ranks == (2,)
    assert finding.summary.startswith(
        "ranks make different tensors as call #4, which never match: ranks 0-1 call "
        "all_reduce of float32[4]"
    )
    assert "; rank 2 calls all_reduce of float32[5]" in finding.summary
    assert finding.summary.endswith(": rank 2 is the odd one out")


@pytest.mark.parametrize("form", ["", "json"])
def test_rank_behind_is_named_with_the_collective_the_others_wait_in(form):
    (finding,) = compare_flight_dumps(scenario("behind", form))
    assert finding.kind == KIND_OUTLIER and finding.recipe == "rank-outside-collective"
    assert finding.ranks == (2,)
    assert re.fullmatch(
        r"rank 2 never called all_reduce #6 \(.*record\.py:\d+\); ranks 0-1 wait in it"
        if form == ""
        else "rank 2 never called all_reduce #6; ranks 0-1 wait in it",
        finding.summary,
    )
    waiting, last = finding.parts
    assert waiting.ranks == (0, 1) and waiting.label.startswith("waiting in all_reduce #6")
    assert last.ranks == (2,) and "broadcast #5" in last.label


@pytest.mark.parametrize(
    "op, flagged",
    [("all_gather", True), ("reduce_scatter", True), ("gather", True), ("all_to_all", False)]
    + [("scatter", False), ("all_gather_v", False)],
)
def test_sizes_are_compared_where_every_member_must_pass_the_same(tmp_path, op, flagged):
    paths = []
    for rank in range(3):  # the size scenario, its collective #4 renamed on every rank
        raw = raw_pickle(FLIGHT / "size" / f"comm_lib_trace_rank_{rank}")
        for entry in raw["entries"]:
            if entry["collective_seq_id"] == 4:
                entry["profiling_name"] = f"gloo:{op}"
        paths.append(tmp_path / f"rank_{rank}")
        paths[-1].write_bytes(pickle.dumps(raw, protocol=2))
    found = compare_flight_dumps([read_flight_dump(str(p)) for p in paths])
    mismatch = [f for f in found if f.kind == KIND_MISMATCH]
    assert bool(mismatch) == flagged, found
    if flagged:
        assert mismatch[0].summary.startswith("ranks make different tensors as call #4")
        assert f"rank 2 calls {op} of float32[5]" in mismatch[0].summary


def test_the_gloo_pg_config_quirk_is_repaired_from_the_entries():
    path = FLIGHT / "behind" / "comm_lib_trace_rank_0"
    raw = raw_pickle(path)
    assert list(raw["pg_config"]) == [""]  # torch 2.13's gloo dump, as recorded
    assert raw["entries"][0]["process_group"] == ("0", "default_pg")
    dump = read_flight_dump(str(path))
    assert dump.repaired and dump.rank == 0 and dump.version == "2.10"
    groups = {g.name: g for g in dump.groups}
    assert set(groups) == {"0", "1"}
    assert groups["0"].desc == "default_pg" and groups["1"].desc == "undefined"
    assert groups["0"].last_enqueued == 6 and groups["0"].last_completed == 5
    assert "pg_config rebuilt from the entries (gloo quirk)" in summarize_flight_dump(dump)[0]


def test_gloo_entries_stay_scheduled_so_completion_comes_from_the_group_status():
    (dump, *_rest) = scenario("behind")
    default = [e for e in dump.entries if e.group == "0"]
    assert {e.state for e in default} == {"scheduled"}
    assert [e.completed for e in default] == [True] * 5 + [False]


def test_the_json_form_reads_like_the_pickle_but_without_stacks():
    for name in ("skipped", "size", "behind"):
        for pickled, jsoned in zip(scenario(name), scenario(name, "json"), strict=True):
            assert jsoned.format == "json" and pickled.format == "pickle"
            assert [(e.group, e.seq, e.op, e.input_sizes) for e in jsoned.entries] == [
                (e.group, e.seq, e.op, e.input_sizes) for e in pickled.entries
            ]
            assert all(e.location is None for e in jsoned.entries)
            assert all(e.location for e in pickled.entries)


def test_the_summary_says_per_group_what_the_rank_did_last():
    lines = summarize_flight_dump(scenario("behind")[2])
    assert lines[0].startswith("rank 2: Flight Recorder ") and "5 entries" in lines[0]
    head, at = lines[1].split(" at ", 1)
    assert head == "  group 0 (default_pg): last broadcast #5 (completed)"
    assert at.endswith(f"{RECORD}:{BROADCAST_LINE}; enqueued #5, completed #5")
    assert len(lines) == 2  # rank 2 is not in group 1 (ranks 0-1)
    pending = summarize_flight_dump(scenario("behind")[0])[1]
    assert pending.endswith("enqueued #6, completed #5; 1 not completed")


def test_the_agents_recorded_json_dumps_name_the_rank_that_skipped_the_all_reduce():
    dumps = [read_flight_dump(str(p)) for p in sorted((DATA / "agent").glob("fr_gloo_rank*"))]
    assert [d.rank for d in dumps] == [0, 1]
    (finding,) = compare_flight_dumps(dumps)
    assert finding.kind == KIND_OUTLIER and finding.ranks == (1,)
    assert "rank 1 never called all_reduce #5" in finding.summary
    assert finding.summary.endswith("; rank 0 waits in it")


# ---- golden: NCCL dumps recorded on an H200 --------------------------------------------


def test_the_nccl_timeout_dump_names_the_collective_that_never_completed():
    dump = read_flight_dump(str(NCCL_TIMEOUT))
    assert dump.rank == 0 and dump.comm_lib_version == "2.28.9" and not dump.repaired
    (finding,) = compare_flight_dumps([dump])
    assert finding.kind == KIND_FR_INCOMPLETE and finding.ranks == (0,)
    assert finding.recipe == "nccl-watchdog-timeout" and finding.severity == SEVERITY_WARNING
    assert finding.summary == (
        "all_reduce #2 of the default group had not completed on rank 0 when its dump was "
        "written; its timeout is 15 s"
    )
    assert finding.location == "/tmp/gpu-record/nccl_timeout/scenario.py:12"


def test_the_healthy_nccl_dump_has_no_finding_and_its_rank_from_its_one_member_world():
    dump = read_flight_dump(str(NCCL_OK))
    assert dump.rank == 0  # the file name has none; pg_config's world is [0]
    assert [e.op for e in dump.entries][:3] == ["all_reduce", "broadcast", "all_reduce"]
    assert all(e.completed and e.backend == "nccl" for e in dump.entries)
    assert compare_flight_dumps([dump]) == []
    assert summarize_flight_dump(dump)[0].endswith("nccl, NCCL 2.28.9")


# ---- which files are dumps ---------------------------------------------------------------


def test_dumps_are_told_apart_by_their_content():
    for path in REAL_FILES:
        assert looks_like_flight_dump(str(path), path.read_bytes()[:4096]), path
    log = DATA / "gpu" / "nccl_ok" / "nccl.vm.501.log"
    others = [log.read_bytes()[:4096], b"1796094207.915\n", b"{}", pickle.dumps([1, 2])]
    others.append(json.dumps({"version": 1, "rank": 0}).encode())
    assert not any(looks_like_flight_dump("x", head) for head in others)


def test_the_rank_comes_from_the_end_of_the_file_name():
    from mldebug.flight.read import rank_from_name

    assert rank_from_name("/run/fr/rank_12") == 12
    assert rank_from_name("comm_lib_trace_rank_3") == 3
    assert rank_from_name("fr_gloo_rank1.json") == 1
    assert rank_from_name("fr_dump.pickle") is None
    assert rank_from_name(".rank_0.77.tmp") is None
    assert rank_from_name("rank_99999999999") is None


def test_the_flight_modules_import_only_the_model_and_plain_helpers():
    from testkit.imports import graph

    edges = graph()
    allowed = {
        "mldebug.model",
        "mldebug.ranges",
        "mldebug.files.rundir",
        "mldebug.files.safeio",
        "mldebug.textsafe",
        "mldebug.wording",
    }
    # the collective ledger
    allowed |= {
        "mldebug.ledger.compare",
        "mldebug.ledger.forms",
        "mldebug.ledger.rules",
        "mldebug.ledger.verdicts",
        "mldebug.ledger.words",
    }
    flight = [m for m in edges if m.startswith("mldebug.flight")]
    assert len(flight) >= 4
    for module in flight:
        outside = {m for m in edges[module] if not m.startswith("mldebug.flight")}
        assert outside <= allowed, (module, outside)


def test_members_by_pg_config_that_left_no_dump_are_named(tmp_path):
    raw = raw_pickle(NCCL_TIMEOUT)  # one NCCL rank; its world made 3 ranks here
    raw["pg_config"]["0"]["ranks"] = "[0, 1, 2]"
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(pickle.dumps(raw, protocol=2))
    (finding,) = compare_flight_dumps([read_flight_dump(str(path))])
    assert finding.kind == KIND_FR_INCOMPLETE
    assert finding.detail.endswith("; no dump from ranks 1-2 of this group (by its pg_config)")


def test_dump_reads_a_runs_dumps_for_a_bounded_time_and_says_what_it_left(tmp_path, monkeypatch):
    from mldebug.model import KIND_FR_UNREAD
    from mldebug.nccl import scan

    run = tmp_path / "run"
    (run / "fr").mkdir(parents=True)
    for dump in (FLIGHT / "behind").glob("comm_lib_trace_rank_*"):
        (run / "fr" / dump.name).write_bytes(dump.read_bytes())
    kinds = [f.kind for f in scan.run_findings(run)]
    assert KIND_OUTLIER in kinds and KIND_FR_UNREAD not in kinds
    monkeypatch.setattr(scan, "RUN_FR_SECONDS", -1.0)  # out of time before the first
    (left,) = scan.run_findings(run)
    assert left.kind == KIND_FR_UNREAD and left.recipe == "rank-behind"
    assert left.summary.startswith("3 of 3 Flight Recorder dumps were not read within -1 s")
    assert f"mldebug nccl {run / 'fr'}" in left.summary
