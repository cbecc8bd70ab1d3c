"""`mldebug explain` over torch.profiler traces: the streaming reader, the split of each
rank's time, the late rank, the DataLoader wait, and bad input.

The traces under tests/data/traces/ are real: 4-rank gloo jobs recorded under
torch.profiler by tests/data/traces/record.py (balanced, one rank with 1.5x the compute,
input-bound). The NCCL case is built here from the format torch documents (the metadata
keys of torch/csrc/profiler/util.h, kineto's kernel events): no GPU exists on this machine.
"""

from __future__ import annotations

import functools
import gzip
import io
import json
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mldebug import cli
from mldebug.errors import EXIT_NO_TARGET, EXIT_OK
from mldebug.explain.engine import explain
from mldebug.traces import intervals, stream
from mldebug.traces.findings import KIND_INPUT_BOUND, KIND_SPLIT, KIND_STRAGGLER
from mldebug.traces.model import ON_DEVICE, ON_HOST
from mldebug.traces.read import read_rank
from mldebug.traces.stream import TraceError, TraceStream

TRACES = Path(__file__).parent / "data" / "traces"
SCENARIOS = ("balanced", "slow_rank", "input_bound")


def files(scenario: str) -> list[Path]:
    return sorted((TRACES / scenario).glob("rank*.pt.trace.json.gz"))


@functools.cache
def judged(scenario: str) -> tuple:
    """explain's findings on one recorded job (read once for the tests that ask)."""
    return tuple(explain([str(TRACES / scenario)]).findings)


def kinds(scenario: str) -> dict[str, object]:
    return {f.kind: f for f in judged(scenario)}


def run(argv: list[str], capsys, stdin: bytes | None = None) -> tuple[int, str, str]:
    if stdin is not None:
        fake = io.TextIOWrapper(io.BytesIO(stdin))
        sys_stdin, sys.stdin = sys.stdin, fake
    try:
        code = cli.main(["explain", *argv])
    finally:
        if stdin is not None:
            sys.stdin = sys_stdin
    out = capsys.readouterr()
    return code, out.out, out.err


# -- the streaming reader ------------------------------------------------------------------


@pytest.mark.parametrize(
    "path", [files(s)[i] for i, s in enumerate(SCENARIOS)], ids=lambda p: p.parent.name
)
def test_the_stream_reads_every_event_json_load_reads_even_in_tiny_windows(path, monkeypatch):
    whole = json.loads(gzip.decompress(path.read_bytes()))
    monkeypatch.setattr(stream, "CHUNK", 509)  # many events cross a window's edge
    with stream.open_trace(path) as text:
        reader = TraceStream(text)
        events = list(reader.events())
    assert events == whole["traceEvents"]
    assert reader.meta == {k: v for k, v in whole.items() if k != "traceEvents"}
    assert reader.meta["distributedInfo"]["backend"] == "gloo"


def read_text(text: str, **kw) -> tuple[list[dict], TraceStream]:
    reader = TraceStream(io.StringIO(text), **kw)
    return list(reader.events()), reader


def test_keys_after_the_events_and_the_bare_array_are_read_too():
    events, reader = read_text(
        '{"traceEvents": [{"ph": "X", "ts": 1, "dur": 2}], "distributedInfo": {"rank": 3}}'
    )
    assert events == [{"ph": "X", "ts": 1, "dur": 2}] and reader.meta["distributedInfo"] == {
        "rank": 3
    }
    events, _ = read_text(' [ {"ph": "X", "ts": 1.5, "dur": 2} , {"ph": "i", "ts": 9} ] \n')
    assert [e["ts"] for e in events] == [1.5, 9]
    assert read_text("[]")[0] == [] and read_text("{}")[0] == []


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('{"traceEvents": [{"ph": "X", "ts": 1, "du', "ends early"),
        ('{"traceEvents": [{"ph": "X"}, ', "ends early"),
        ("hello, world", "not a Chrome trace"),
        ('{"traceEvents": [}', "not JSON"),
        ('{"traceEvents": []} trailing', "more after"),
        ("", "the file ends"),
    ],
)
def test_what_is_not_a_whole_trace_is_one_line_that_says_so(text, said):
    with pytest.raises(TraceError) as error:
        read_text(text)
    assert said in str(error.value) and "\n" not in str(error.value)


def test_one_value_larger_than_the_cap_is_refused_not_held(monkeypatch):
    monkeypatch.setattr(stream, "MAX_VALUE", 1000)
    monkeypatch.setattr(stream, "CHUNK", 100)
    with pytest.raises(TraceError, match="over"):
        read_text('{"traceEvents": [{"name": "' + "x" * 5000 + '"}]}')


def test_a_trace_longer_than_the_cap_is_read_as_far_as_the_cap(monkeypatch):
    monkeypatch.setattr(stream, "CHUNK", 64)
    body = ",".join(json.dumps({"ph": "X", "ts": i, "dur": 1}) for i in range(200))
    events, reader = read_text('{"traceEvents": [' + body + "]}", max_chars=640)
    assert reader.cut and 0 < len(events) < 200
    assert [e["ts"] for e in events] == list(range(len(events)))


def test_a_truncated_gzip_is_said_as_such(tmp_path):
    data = files("balanced")[0].read_bytes()
    cut = tmp_path / "rank0.pt.trace.json.gz"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceError, match="gzip stream ends early"):
        read_rank(str(cut))


def test_a_symlink_is_never_followed(tmp_path):
    link = tmp_path / "rank0.pt.trace.json.gz"
    link.symlink_to(files("balanced")[0])
    with pytest.raises(OSError):
        read_rank(str(link))


# -- unions of time ------------------------------------------------------------------------

spans = st.lists(
    st.tuples(st.integers(0, 200), st.integers(1, 40)).map(
        lambda p: (float(p[0]), float(p[0] + p[1]))
    ),
    max_size=30,
)


def covered(groups, upto=260):
    return {t for a, b in groups for t in range(int(a), int(b))}


@settings(max_examples=60, deadline=None)
@given(spans, spans)
def test_union_and_minus_agree_with_counting_each_microsecond(a, b):
    ua, ub = intervals.union(a), intervals.union(b)
    assert intervals.total(ua) == len(covered(a))
    assert intervals.minus(ua, ub) == len(covered(a) - covered(b))


def test_nested_ops_collapse_as_they_come_so_memory_stays_bounded(monkeypatch):
    monkeypatch.setattr(intervals, "COMPACT_AT", 300)
    union = intervals.Union()
    for step in range(20):  # 20 steps of 1,000 nested ops each
        for depth in range(1_000):
            union.add(step * 100.0 + depth * 1e-3, step * 100.0 + 50 - depth * 1e-3)
        assert len(union) <= 300 + step + 1
    assert intervals.total(union.spans()) == pytest.approx(20 * 50)


# -- the recorded jobs ---------------------------------------------------------------------


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_each_rank_is_read_with_its_rank_steps_and_a_split_that_adds_up(scenario):
    for path in files(scenario):
        trace, rank = read_rank(str(path))
        assert rank == int(path.name[4]) and trace.world_size == 4 and trace.backend == "gloo"
        assert trace.where == ON_HOST and len(trace.steps) >= 3
        busy = trace.compute + trace.exposed
        assert busy + trace.idle == pytest.approx(trace.window, rel=1e-9)
        assert 0 < trace.exposed <= trace.comm
        # DDP's two gradient buckets and the loss's all_reduce, each profiled step
        assert len(trace.collectives) == 3 * len(trace.steps)
        assert {c.op for c in trace.collectives} == {"all_reduce"}


def test_a_balanced_job_gets_its_split_and_no_warning():
    found = judged("balanced")
    assert [f.kind for f in found] == [KIND_SPLIT]
    assert found[0].ranks == (0, 1, 2, 3) and found[0].severity == "info"


def test_the_split_says_the_late_rank_of_every_collective_matched():
    split = kinds("balanced")[KIND_SPLIT]
    facts = dict(split.facts)
    late = facts["last_per_collective"].split("; ")
    assert len(late) == 30  # 10 profiled steps: two gradient buckets and the loss each
    assert late[0].startswith("all_reduce of 270,864 elements #0: rank ")
    assert any(entry.startswith("all_reduce of 1 element #") for entry in late)
    counted = dict(part.split(": ") for part in facts["last_by_rank"].split(", "))
    assert sum(int(n) for n in counted.values()) == 30


def test_the_slow_rank_is_named_with_the_ranks_that_wait_for_it():
    found = kinds("slow_rank")
    straggler = found[KIND_STRAGGLER]
    assert straggler.ranks == (2,) and straggler.waiting == (0, 1, 3)
    assert straggler.recipe == "stragglers" and straggler.severity == "warning"
    facts = dict(straggler.facts)
    assert float(facts["compute_ratio"]) > 1.0  # it did compute more than the others
    assert KIND_INPUT_BOUND not in found


def test_an_input_bound_job_is_named_on_every_rank_and_no_rank_is_a_straggler():
    found = kinds("input_bound")
    assert found[KIND_INPUT_BOUND].ranks == (0, 1, 2, 3)
    assert KIND_STRAGGLER not in found
    assert dict(found[KIND_INPUT_BOUND].facts)["data_share"] >= "0.30"


# -- the command ---------------------------------------------------------------------------


def test_the_command_on_a_folder_prints_the_split_per_rank(capsys):
    code, out, err = run([str(TRACES / "slow_rank")], capsys)
    assert code == EXIT_OK, err
    assert out.startswith("mldebug explain: 4 profiler traces (")
    assert "ranks seen: 0-3" in out
    assert "1. ▲ rank 2 arrives last at" in out
    assert "4 ranks profiled (gloo): median step" in out
    assert "rank 3 " in out and "exposed" in out


def test_json_lists_the_traces_and_the_findings(capsys):
    paths = [str(p) for p in files("input_bound")]
    code, out, _ = run(["--json", *paths], capsys)
    report = json.loads(out)
    assert code == EXIT_OK
    assert [t["rank"] for t in report["traces"]] == [0, 1, 2, 3]
    assert report["findings"][0]["kind"] == KIND_INPUT_BOUND
    assert report["findings"][0]["evidence"] == paths


def test_a_paste_of_file_names_reads_those_files(capsys):
    names = "\n".join(str(p) for p in files("balanced")) + "\n"
    code, out, _ = run(["-"], capsys, stdin=names.encode())
    assert code == EXIT_OK
    assert out.startswith("mldebug explain: 4 profiler traces (")


@pytest.mark.parametrize("bad", ["not_a_trace", "truncated_gzip", "symlink"])
def test_bad_input_is_one_line_and_exit_3(bad, tmp_path, capsys):
    path = tmp_path / "rank0.pt.trace.json.gz"
    if bad == "not_a_trace":
        path = tmp_path / "rank0.json"
        path.write_text('{"loss": [1.0, 0.9]}')
    elif bad == "truncated_gzip":
        data = files("balanced")[0].read_bytes()
        path.write_bytes(data[: len(data) // 3])
    else:
        path.symlink_to(files("balanced")[0])
    code, out, err = run([str(path)], capsys)
    assert code == EXIT_NO_TARGET and out == ""
    lines = err.strip().splitlines()
    assert lines[0].startswith(f"mldebug explain: nothing readable: {path}: ")
    assert "Traceback" not in err
    said = {
        "not_a_trace": "not a Chrome trace",
        "truncated_gzip": "gzip stream ends early",
        "symlink": "symbolic link",
    }[bad]
    assert said in lines[0]


def test_a_bad_file_beside_good_ones_is_a_line_and_the_rest_is_read(tmp_path, capsys):
    folder = tmp_path / "traces"
    folder.mkdir()
    for path in files("balanced"):
        (folder / path.name).write_bytes(path.read_bytes())
    (folder / "rank0.pt.trace.json.gz").write_bytes(files("balanced")[0].read_bytes()[:5000])
    code, out, _ = run([str(folder)], capsys)
    assert code == EXIT_OK
    assert "not read: " in out and "rank0.pt.trace.json.gz: the gzip stream ends early" in out
    assert out.startswith("mldebug explain: 3 profiler traces (")


# -- traces without a rank, NCCL's format ---------------------------------------------------


def write_trace(path: Path, events: list[dict], meta: dict | None = None) -> Path:
    path.write_text(json.dumps({**(meta or {}), "traceEvents": events}))
    return path


def test_traces_that_say_no_rank_are_numbered_in_order_and_it_is_said(tmp_path):
    paths = []
    for i in range(2):
        events = [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 10 + i}]
        paths.append(str(write_trace(tmp_path / f"worker{i}.json", events)))
    report = explain(paths)
    assert sorted(t.rank for t in report.traces) == [0, 1]
    assert any("says no rank; called rank" in p for p in report.problems)


def nccl_rank(rank: int, late: float) -> list[dict]:
    """One rank's device timeline, as kineto writes a CUDA job with NCCL: compute kernels,
    then an all_reduce kernel per step carrying record_param_comms' metadata. `late`:
    microseconds this rank computes longer each step, so the others' kernels wait for it."""
    events = []
    for step in range(6):
        t0 = step * 10_000.0
        events.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{step}",
                "ts": t0,
                "dur": 10_000.0,
            }
        )
        compute = 6_000.0 + late
        events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": "ampere_sgemm_128x64_nn",
                "ts": t0 + 100,
                "dur": compute,
            }
        )
        end = t0 + 100 + 6_000 + 2_000 + 500  # every rank leaves when the last arrived
        start = t0 + 100 + compute
        events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
                "ts": start,
                "dur": end - start,
                "args": {
                    "Collective name": "allreduce",
                    "In msg nelems": 1048576,
                    "Out msg nelems": 1048576,
                    "Group size": 4,
                    "dtype": "Float",
                    "Process Group Name": "0",
                    "Process Group Description": "default_pg",
                    "Seq": step + 1,
                },
            }
        )
    return events


def test_nccl_kernels_are_matched_by_sequence_number_and_the_late_rank_named(tmp_path):
    paths = []
    for rank in range(4):
        meta = {"distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 4}}
        late = 2_000.0 if rank == 1 else 0.0
        paths.append(str(write_trace(tmp_path / f"host_{rank}.json", nccl_rank(rank, late), meta)))
    report = explain(paths)
    assert {t.where for t in report.traces} == {ON_DEVICE}
    found = {f.kind: f for f in report.findings}
    assert found[KIND_STRAGGLER].ranks == (1,) and found[KIND_STRAGGLER].waiting == (0, 2, 3)
    assert dict(found[KIND_STRAGGLER].facts)["last_at"] == "6/6"
    assert "allreduce of 1,048,576 elements #" in found[KIND_STRAGGLER].detail


def test_a_long_profile_of_many_collectives_is_judged_without_overflow():
    """20,000 collectives a rank (a long NCCL profile): the test of chance stays finite."""
    from mldebug.traces.findings import trace_findings
    from mldebug.traces.model import Collective, RankTrace

    def rank(r: int) -> RankTrace:
        colls = tuple(
            Collective("0", "allreduce", "4096", i, i * 100.0, 10.0 if r == 3 else 40.0)
            for i in range(20_000)
        )
        return RankTrace(
            source=f"rank{r}.json",
            rank=r,
            world_size=4,
            backend="nccl",
            where=ON_DEVICE,
            events=40_000,
            steps=(1000.0,) * 2000,
            window=2e6,
            compute=1.2e6,
            comm=6e5,
            exposed=3e5,
            idle=2e5,
            data=0.0,
            sync=0.0,
            collectives=colls,
        )

    found = {f.kind: f for f in trace_findings([rank(r) for r in range(4)])}
    assert found[KIND_STRAGGLER].ranks == (3,)
    assert dict(found[KIND_STRAGGLER].facts)["last_at"] == "20000/20000"
