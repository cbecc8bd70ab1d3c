"""NCCL RAS: saved answers read (golden files of NCCL 2.24-2.30, assembled from NCCL's
source: tests/data/ras/README.md), the live client against a fake endpoint built from the
protocol in NCCL's src/ras/ (tests/ras_fake.py), and the verdict over counts and stacks."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from testkit.ras_fake import FakeRas, nccl_json

from mldebug.collect.ras import BUDGET_S, addresses_of, ask_ras
from mldebug.nccl.scan import scan_paths
from mldebug.ras.read import RasError, looks_like_ras, parse_ras, read_ras_file
from mldebug.ras.verdict import ras_findings

DATA = Path(__file__).parent / "data" / "ras"
SLACK = 5.0  # a loaded machine; the bound is what is checked, not the speed


def test_text_2_26_names_the_minority_and_the_counts():
    report = read_ras_file(str(DATA / "text_2.26_mismatch.txt"))
    assert (report.format, report.nccl_version, report.cuda_runtime) == ("text", "2.26.2", 12060)
    (comm,) = report.comms
    assert (comm.hash, comm.size, comm.status, comm.errors) == (
        "3c9e21a0b4d77f15",
        32,
        "RUNNING",
        "MISMATCH",
    )
    groups = [(g.op, g.launched, g.ranks, g.listed) for g in comm.count_groups]
    assert groups == [("AllGather", 640, 30, ()), ("AllGather", 641, 2, (12, 13))]
    assert [(r.rank, r.pid, r.host, r.cuda_dev) for r in comm.ranks] == [
        (12, 51012, "10.20.0.12", 4),
        (13, 51013, "10.20.0.12", 5),
    ]


def test_text_2_24_one_count_dead_and_missing():
    report = read_ras_file(str(DATA / "text_2.24_dead.txt"))
    assert report.dead == ((52107, "10.20.1.2"),) and report.timeouts == 1
    (comm,) = report.comms
    assert [m.rank for m in comm.missing] == [7]
    assert comm.count_groups[-1].op == "collective" and comm.count_groups[-1].listed == (2,)


def test_text_2_30_status_and_none_launched():
    report = read_ras_file(str(DATA / "text_2.30_status.txt"))
    assert [c.label for c in report.comms] == ["#0-0", "#1-0", "#1-1"]
    rank = report.comms[0].ranks[0]
    assert (rank.rank, rank.status, rank.count("AllReduce"), rank.count("Broadcast")) == (
        1,
        "ABORT",
        87,
        0,
    )


def test_json_2_28_9_missing_comma_is_put_back():
    report = read_ras_file(str(DATA / "json_2.28.9_missing.json"))
    assert report.repaired and report.format == "json"
    (comm,) = report.comms
    assert comm.complete and [m.rank for m in comm.missing] == [3] and comm.missing[0].dead
    assert [r.count("AllReduce") for r in comm.ranks] == [412, 412, 411]


def test_json_healthy_has_no_finding_and_mismatch_names_the_lower_side():
    assert ras_findings([read_ras_file(str(DATA / "json_2.29.2_healthy.json"))]) == []
    assert ras_findings([read_ras_file(str(DATA / "text_2.26_healthy.txt"))]) == []
    (finding,) = ras_findings([read_ras_file(str(DATA / "json_2.30_mismatch.json"))])
    assert finding.ranks == (2, 3) and "never launched AllReduce #901" in finding.summary
    assert "launches, not completions" in finding.detail


def test_nccl_1911_the_stacks_decide_which_side_is_behind():
    # GIVEN 30 ranks at AllGather 640 and the 2 NCCL names at 641
    report = read_ras_file(str(DATA / "text_2.26_mismatch.txt"))
    rank_of = {51000 + r: r for r in range(32)}
    # WHEN the 30 are outside any collective and 12-13 wait in all_gather
    stacks = {51000 + r: ("all_gather" if r in (12, 13) else None) for r in range(32)}
    (finding,) = ras_findings([report], stacks, rank_of)
    # THEN the 30 are behind, named, and NCCL's naming of the other side is said
    assert finding.ranks == tuple(r for r in range(32) if r not in (12, 13))
    assert "outside any collective" in finding.summary and "nccl#1911" in finding.detail
    # AND when the stacks say the opposite, the two NCCL named are the ones behind
    stacks = {51000 + r: (None if r in (12, 13) else "all_gather") for r in range(32)}
    (finding,) = ras_findings([report], stacks, rank_of)
    assert finding.ranks == (12, 13)


def test_equal_counts_all_waiting_is_said_as_launches_not_completions():
    report = read_ras_file(str(DATA / "json_2.29.2_healthy.json"))
    stacks = {54200: "all_reduce", 54201: "all_reduce"}
    (finding,) = ras_findings([report], stacks, {54200: 0, 54201: 1})
    assert finding.severity == "info" and "did not complete" in finding.summary
    # a healthy job (ranks outside collectives, counts equal) stays silent
    assert ras_findings([report], {54200: None, 54201: None}, {54200: 0, 54201: 1}) == []


@pytest.mark.parametrize(
    "data",
    [b"", b"{", b"[1, 2]", b'{"nccl_version": "2.30", "communicators": 5}', b"\x80\x02}q."],
)
def test_garbage_is_one_line_never_a_traceback(data):
    try:
        report = parse_ras(data, "x")
    except RasError as error:
        assert "\n" not in str(error)
    else:
        assert report.comms == ()


def test_detection_and_scan(tmp_path):
    for path in DATA.glob("*_*.*"):
        assert looks_like_ras(path.read_bytes()[:4096]), path
    nccl_line = b"gpu-a:4100:4100 [0] NCCL INFO NCCL version 2.26.2+cuda12.2\n"
    assert not looks_like_ras(nccl_line)
    scan = scan_paths([str(DATA)])
    assert len(scan.ras) == 7 and not scan.problems
    assert any("#641" in f.summary for f in scan.findings)


# ---- the live client, against the fake endpoint ----


def _ask(fake: FakeRas, monkeypatch) -> tuple[object, float]:
    monkeypatch.setattr("mldebug.collect.ras.addresses_of", lambda pids: [("127.0.0.1", fake.port)])
    started = time.monotonic()
    asked = ask_ras([1])
    return asked, time.monotonic() - started


def test_fake_endpoint_json_answer_and_the_commands_ncclras_sends(monkeypatch):
    with FakeRas() as fake:
        fake.answers["json"] = nccl_json("2.30.7", [(0, "127.0.0.1", 11, {"AllReduce": 3})])
        asked, _ = _ask(fake, monkeypatch)
    assert asked.report is not None and asked.report.format == "json"
    assert fake.commands == ["CLIENT PROTOCOL 2", "TIMEOUT 1", "SET FORMAT json", "STATUS"]


def test_fake_endpoint_before_json_falls_back_to_text(monkeypatch):
    with FakeRas(json_support=False) as fake:
        fake.answers["text"] = (DATA / "text_2.26_mismatch.txt").read_bytes()
        asked, _ = _ask(fake, monkeypatch)
    assert asked.report is not None and asked.report.format == "text"


@pytest.mark.parametrize("mode", ["stall", "garbage", "huge", "drip"])
def test_fake_endpoint_misbehaving_is_bounded_and_one_note(mode, monkeypatch):
    with FakeRas(mode) as fake:
        fake.answers["json"] = nccl_json("2.30.7", [(0, "127.0.0.1", 11, {})]) * 20
        asked, took = _ask(fake, monkeypatch)
    assert asked.report is None and len(asked.notes) == 1 and "\n" not in asked.notes[0]
    assert took < BUDGET_S + SLACK


def test_refused_connection_is_a_note(monkeypatch):
    with FakeRas() as fake:
        port = fake.port
    monkeypatch.setattr("mldebug.collect.ras.addresses_of", lambda pids: [("127.0.0.1", port)])
    asked = ask_ras([1])
    assert asked.report is None and "nothing listens" in asked.notes[0]


def test_addresses_come_from_the_ranks_environment(monkeypatch):
    envs = {1: {"NCCL_RAS_ADDR": "127.0.0.1:29999"}, 2: {"NCCL_RAS_ENABLE": "0"}, 3: None}
    monkeypatch.setattr("mldebug.files.procfs.proc_environ", lambda pid: envs[pid])
    assert addresses_of([1, 2]) == [("127.0.0.1", 29999)]
    assert addresses_of([2]) == []
    assert addresses_of([1, 3]) == [("127.0.0.1", 29999), ("localhost", 28028)]


def test_a_remote_address_is_never_asked(monkeypatch):
    monkeypatch.setattr("mldebug.collect.ras.addresses_of", lambda pids: [("192.0.2.7", 28028)])
    asked = ask_ras([1])
    assert asked.report is None and "not an address of this machine" in asked.notes[0]


def test_launch_counts_per_op_for_a_sequence_comparison():
    (comm, _) = read_ras_file(str(DATA / "json_2.30_mismatch.json")).comms
    assert comm.launches()["AllReduce"] == {0: 901, 1: 901, 2: 900, 3: 900}
