"""`mldebug explain` as a user runs it: the real command in a subprocess, on a paste piped
in, files, a run directory and recorded Flight Recorder dumps; text and --json; exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

DATA = Path(__file__).parent / "data"
CORPUS = DATA / "explain"


def mldebug(*args: str, stdin: str | bytes | None = None) -> subprocess.CompletedProcess:
    data = stdin.encode() if isinstance(stdin, str) else stdin
    return subprocess.run(
        [sys.executable, "-m", "mldebug", "explain", *args],
        input=data if data is not None else b"",
        capture_output=True,
        timeout=120,
    )


def test_a_paste_on_stdin_names_the_suspect_the_lines_and_the_recipe():
    done = mldebug("-", stdin=(CORPUS / "timeout_rank0_tokenizing.log").read_bytes())
    out = done.stdout.decode()
    assert done.returncode == 1, done.stderr
    assert out.startswith("mldebug explain: a paste (")
    assert "1. ✖ ranks 1-3 of at least 4 timed out in ALLREDUCE SeqNum 2 of PG 0" in out
    assert (
        "rank 0 is not in the paste: if it printed nothing, it never reached that collective" in out
    )
    assert "lines: <stdin>:1" in out
    assert "recipe: mldebug recipes nccl-watchdog-timeout" in out
    assert "from a fragment: the world size is not in the paste" in out


def test_piped_input_without_a_dash_is_read_too():
    done = mldebug(stdin=(CORPUS / "dup_gpu_one_line.log").read_bytes())
    assert done.returncode == 1
    assert "recipe: mldebug recipes duplicate-gpu" in done.stdout.decode()


def test_json_findings_have_dumps_shape_plus_confidence_evidence_fix_and_note():
    done = mldebug(
        "--json", str(CORPUS / "gloo_caret_list.log"), str(CORPUS / "oom_fragmented.log")
    )
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert {"version", "sources", "findings", "verdict", "ranks_seen", "problems"} <= set(report)
    top = report["findings"][0]
    assert {"kind", "ranks", "summary", "recipe", "location", "severity"} <= set(top)
    assert {"confidence", "evidence", "fix", "note"} <= set(top)
    kinds = {f["kind"]: f for f in report["findings"]}
    assert kinds["gloo_interface"]["recipe"] == "network-interface"
    assert kinds["cuda_oom"]["recipe"] == "cuda-oom-fragmentation"
    assert kinds["cuda_oom"]["evidence"][0].endswith("oom_fragmented.log:4")
    confidences = [f["confidence"] for f in report["findings"]]
    assert confidences == sorted(confidences, reverse=True)


def test_a_run_directory_is_read_with_the_nccl_reader():
    done = mldebug(str(DATA / "nccl" / "watchdog_2.4"))
    out = done.stdout.decode()
    assert done.returncode == 1, done.stderr
    assert "rank 2 never called all_reduce #57; ranks 0-1,3" in out


def test_flight_recorder_dumps_are_read():
    done = mldebug("--json", str(DATA / "gpu" / "nccl_timeout"))
    report = json.loads(done.stdout)
    assert report["flight_dumps"], report["problems"]


def test_text_that_says_nothing_wrong_exits_0():
    # Never cry wolf: a healthy job's chatter, INFO lines and all.
    healthy = (
        "Epoch 1:  50%|█████     | 50/100 [00:10<00:10,  5.00it/s, loss=0.31]\n"
        "node-a:4100:4100 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.5<0>\n"
        "node-a:4100:4100 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.5<0>\n"
        # one node, loopback and a docker bridge in the list, several interfaces: harmless here
        "node-a:4100:4100 [0] NCCL INFO NET/Socket : Using [0]lo:127.0.0.1<0> [1]docker0:172.17.0.1<0>"
        " [2]eno1:10.1.0.5<0> [3]eno2:10.2.0.5<0>\n"
        "node-a:4100:4177 [0] NCCL INFO comm 0x55d1 rank 0 nranks 1 cudaDev 0 busId 18000 - Init COMPLETE\n"
        "[2026-12-01 10:00:00,001] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! "
        "Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768\n"
        "{'loss': 0.2991, 'learning_rate': 1e-05, 'epoch': 1.0}\n"
    )
    done = mldebug("-", stdin=healthy)
    assert done.returncode == 0, done.stdout.decode()
    assert "✖" not in done.stdout.decode() and "▲" not in done.stdout.decode()


def test_exit_codes_for_bad_input():
    missing = mldebug("/nonexistent/log.txt")
    assert missing.returncode == 3
    assert b"nothing readable" in missing.stderr and b"Traceback" not in missing.stderr
    empty = mldebug("-", stdin="")
    assert empty.returncode == 3
    bad = mldebug("--no-such-option")
    assert bad.returncode == 2


def test_no_path_on_a_terminal_is_a_usage_error():
    # stdin a terminal: there is nothing to read, and waiting would look like a hang.
    master, slave = os.openpty()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "mldebug", "explain"],
            stdin=slave,
            capture_output=True,
            timeout=60,
        )
    finally:
        os.close(master)
        os.close(slave)
    assert done.returncode == 2
    assert b"give a PATH" in done.stderr


def test_escape_sequences_in_a_paste_never_reach_the_terminal():
    hostile = "\x1b]0;pwned\x07RuntimeError: Unable to find address for: ^lo\x1b[2J\n"
    done = mldebug("-", stdin=hostile)
    out = done.stdout
    assert b"\x1b" not in out and b"\x07" not in out
    assert done.returncode == 1


RAS = DATA / "ras"


def test_a_saved_ras_report_is_read_not_called_an_empty_paste(tmp_path):
    # GIVEN an `ncclras` answer saved to a file (text, NCCL 2.26) and one in JSON (2.28.9)
    done = mldebug(str(RAS / "text_2.26_mismatch.txt"))
    out = done.stdout.decode()
    # THEN explain reads it with mldebug nccl's RAS reader: the ranks behind, the recipe
    assert done.returncode == 1, done.stderr
    assert out.startswith("mldebug explain: 1 NCCL RAS report")
    assert "30 ranks of 32 never launched AllGather #641" in out
    assert "recipe: mldebug recipes rank-outside-collective" in out
    assert "nothing readable" not in done.stderr.decode()
    missing = mldebug(str(RAS / "json_2.28.9_missing.json"))
    assert missing.returncode == 1
    assert "recipe: mldebug recipes rank-outside-collective" in missing.stdout.decode()


def test_a_ras_report_pasted_after_other_output_is_read_and_a_healthy_one_stays_quiet():
    before = "[rank0]:step 1200 loss 2.31\r\n$ ncclras\r\n"
    report = (RAS / "text_2.26_mismatch.txt").read_text().replace("\n", "\r\n")
    done = mldebug("-", stdin=before + report)
    assert done.returncode == 1
    assert "recipe: mldebug recipes rank-outside-collective" in done.stdout.decode()
    healthy = mldebug("-", stdin=(RAS / "text_2.26_healthy.txt").read_bytes())
    assert healthy.returncode == 0, healthy.stdout.decode()
    assert "Nothing wrong found" in healthy.stdout.decode()
