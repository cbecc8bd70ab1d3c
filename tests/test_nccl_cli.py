"""`mldebug nccl PATH...` as a user runs it: the real command in a subprocess, on the golden
logs (tests/data/nccl, tests/data/gpu; see their READMEs), text and --json, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

DATA = Path(__file__).parent / "data"


def mldebug(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mldebug", "nccl", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )


def test_text_report_names_the_rank_and_the_recipe_and_exits_1():
    done = mldebug(str(DATA / "nccl" / "watchdog_2.4"))
    assert done.returncode == 1, done.stderr
    out = done.stdout
    assert out.startswith("mldebug nccl: 4 log files")
    assert "✖ rank 2 never called all_reduce #57; ranks 0-1,3 timed out in it" in out
    assert "what to do: mldebug recipes rank-outside-collective" in out
    assert "PG 0: last enqueued 56, last completed 56" in out  # rank 2's summary


def test_json_has_dumps_finding_shape_and_each_ranks_facts():
    done = mldebug("--json", str(DATA / "nccl" / "transport"), str(DATA / "nccl" / "versions"))
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    network = next(f for f in report["findings"] if f["kind"] == "nccl_network")
    # The same keys as `mldebug dump --json`'s findings (report.jsonout.finding_to_json).
    assert set(network) == {
        "kind",
        "severity",
        "ranks",
        "ranks_text",
        "summary",
        "location",
        "recipe",
        "detail",
        "parts",
        "waiting",
        "waited_s",
        "collective",
        "sources",
        "facts",
    }
    assert network["ranks"] == [3] and network["recipe"] == "nccl-sockets-instead-of-ib"
    rank3 = next(r for r in report["ranks"] if r["rank"] == 3 and r["hosts"] == ["gpu-b"])
    assert rank3["network"] == "Socket" and rank3["interface"] == "eth0"
    assert rank3["comms"][0]["init_complete"] is True
    assert len(report["files"]) == 6 and report["problems"] == []


def test_a_mix_of_files_and_directories_with_flight_recorder_dumps():
    done = mldebug(
        str(DATA / "gpu" / "nccl_timeout" / "stderr.rank0.txt"),
        str(DATA / "gpu" / "nccl_timeout" / "nccl_trace_rank_0"),
        str(DATA / "gpu" / "nccl_ok"),
    )
    assert done.returncode == 1, done.stderr
    # The .json there is passed over, and so is the empty stdout.rank0.txt.
    assert "3 log files" in done.stdout.splitlines()[0]
    assert "2 Flight Recorder dumps" in done.stdout.splitlines()[0]
    assert "Flight Recorder\n  rank 0: Flight Recorder" in done.stdout


def test_nothing_wrong_exits_0():
    done = mldebug(str(DATA / "gpu" / "nccl_ok" / "nccl.vm.501.log"))
    assert done.returncode == 0, done.stderr
    assert "Nothing wrong found across the ranks." in done.stdout
    assert "network Socket via eth0" in done.stdout


def test_files_without_any_nccl_line_say_so_and_exit_0(tmp_path):
    (tmp_path / "train.log").write_text("epoch 1 loss 0.5\n")
    done = mldebug(str(tmp_path))
    assert done.returncode == 0
    assert "No NCCL debug lines" in done.stdout


def test_nothing_readable_is_one_line_and_exit_3(tmp_path):
    done = mldebug(str(tmp_path / "missing.log"))
    assert done.returncode == 3
    assert done.stdout == ""
    assert done.stderr.startswith("mldebug nccl: nothing readable: ")
    assert "No such file or directory" in done.stderr
    assert "Traceback" not in done.stderr


def test_no_path_is_a_usage_error():
    done = mldebug()
    assert done.returncode == 2
    assert "PATH" in done.stderr


def test_what_a_log_says_reaches_the_terminal_as_plain_text(tmp_path):
    # A WARN carrying a terminal title escape, an 8-bit CSI and Rich markup.
    (tmp_path / "n.log").write_bytes(
        b"\nh:7:7 [0] misc/x.cc:1 NCCL WARN [red]boom[/red] \x1b]0;pwned\x07 \x9b2J end\n"
    )
    done = mldebug(str(tmp_path))
    assert "[red]boom[/red]" in done.stdout
    assert "\x1b" not in done.stdout and "\x9b" not in done.stdout and "\x07" not in done.stdout


def test_a_run_s_flight_recorder_directory_reads_as_dumps_only(tmp_path):
    # <run>/fr/ holds the ranks' dumps and the empty `request` file that asks for them.
    for dump in (DATA / "flight" / "behind").glob("comm_lib_trace_rank_*"):
        (tmp_path / dump.name).write_bytes(dump.read_bytes())
    (tmp_path / "request").write_text("1796097531.343\n")  # when the watchdog asked
    done = mldebug(str(tmp_path))
    assert done.returncode == 1, done.stderr
    assert done.stdout.startswith("mldebug nccl: 3 Flight Recorder dumps"), done.stdout[:200]
