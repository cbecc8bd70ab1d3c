"""A timeout is not a root cause: `mldebug run`'s first-failure report of a job whose ranks die
of collective timeouts names the rank that caused them and what each rank was waiting in.

Unit tests: states written into a run directory as docs/agent.md says the agent writes them
(ranks/<rank>/state.json, read back by the real reader), error texts as gloo and NCCL write
them (torch213-notes.md §2; no GPU here, so NCCL's lines are the documented ones).
The real job: the book's mismatch on gloo (rank 0 makes one all_reduce more than rank 1, which
goes on to a barrier; tests/jobs/one_more_all_reduce.py) under `mldebug run`. Its state.json
comes from the real agent when it writes one, else from a stand-in that follows the contract
(tests/jobs/contract_agent.py); the last test is for the real agent only.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from testkit.agent_writer import Made, write_state

from mldebug.analysis.exit_waits import Place, explain, timeout_of
from mldebug.collect.agentstate import read_state
from mldebug.files.rundir import RunPaths
from mldebug.files.safeio import make_private_dir
from mldebug.launch.failures import Failure, format_report

GLOO = (
    "[../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 5000ms "
    "for recv operation to complete"
)
NCCL = (
    "[rank2]:[E626 05:06:30.929096625 ProcessGroupNCCL.cpp:632] [Rank 2] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=120049, OpType=_ALLGATHER_BASE, "
    "NumelIn=16384000, NumelOut=131072000, Timeout(ms)=1800000) ran for 1800065 milliseconds "
    "before timing out."
)
AR, BARRIER, GATHER = "/job/train.py:9", "/job/train.py:11", "/job/train.py:14"


def write_calls(paths: RunPaths, rank: int, calls: list[tuple[str, str]], waiting=True):
    """The rank's state.json, by the agent's own writer, after making `calls` (op, site);
    the last one still pending when `waiting`, else all complete."""
    made = [
        Made(
            op,
            site,
            100.0 + seq,
            None if waiting and seq == len(calls) else 100.5 + seq,
        )
        for seq, (op, site) in enumerate(calls, 1)
    ]
    write_state(paths, rank, {"default_pg": made}, now=120.0, sizes={"default_pg": 2})


@pytest.fixture
def paths(tmp_path):
    return RunPaths(make_private_dir(tmp_path / "run"))


def states(paths, ranks):
    return {rank: read_state(paths.root, rank) for rank in ranks}


def test_the_books_example_names_the_rank_with_one_all_reduce_more(paths):
    write_calls(paths, 0, [("all_reduce", AR)] * 4)
    write_calls(paths, 1, [("all_reduce", AR)] * 3 + [("barrier", BARRIER)])
    explanation = explain(states(paths, [0, 1]), died={0: 109.0, 1: 109.0})
    cause = explanation.cause
    assert cause.culprits == (0,) and cause.seq == 4 and cause.location == AR
    assert cause.summary == (
        f"ranks make different collectives as call #4, which never match: rank 0 calls "
        f"all_reduce ({AR}); rank 1 calls barrier ({BARRIER}): rank 0 made one all_reduce "
        "more than the others (a loop ran once more)"
    )
    assert explanation.waits == (
        f"rank 0: waiting in all_reduce #4 of default_pg at {AR} (for 5.0s)",
        f"rank 1: waiting in barrier #4 of default_pg at {BARRIER} (for 5.0s)",
    )


def test_a_rank_that_never_made_the_call_the_others_wait_in_is_the_cause(paths):
    for rank in (0, 2, 3):
        write_calls(paths, rank, [("all_reduce", AR)] * 6)
    write_calls(paths, 1, [("all_reduce", AR)] * 5, waiting=False)  # skipped one, went on
    where = {1: Place("wait_for_checkpoint (/job/train.py:30)")}
    explanation = explain(states(paths, [0, 1, 2, 3]), where=where)
    assert explanation.cause.culprits == (1,)
    assert explanation.cause.summary == (
        f"rank 1 never called all_reduce #6 ({AR}); ranks 0,2-3 wait in it"
    )
    assert explanation.waits == (
        f"ranks 0,2-3: waiting in all_reduce #6 of default_pg at {AR}",
        "rank 1: in no collective, in wait_for_checkpoint (/job/train.py:30); its last call: "
        f"all_reduce #5 of default_pg at {AR}, completed",
    )


def test_of_three_ranks_the_one_in_another_op_is_the_cause(paths):
    write_calls(paths, 0, [("all_reduce", AR)] * 4)
    write_calls(paths, 1, [("all_reduce", AR)] * 4)
    write_calls(paths, 2, [("all_reduce", AR)] * 3 + [("all_gather", GATHER)])
    cause = explain(states(paths, [0, 1, 2])).cause
    assert cause.culprits == (2,) and cause.location == GATHER
    assert f"rank 2 calls all_gather ({GATHER}): rank 2 is the odd one out" in cause.summary


def test_sides_of_one_size_with_nothing_to_tell_them_apart_are_both_named(paths):
    write_calls(paths, 0, [("all_reduce", AR)] * 3 + [("broadcast", "/job/train.py:20")])
    write_calls(paths, 1, [("all_reduce", AR)] * 3 + [("barrier", BARRIER)])
    explanation = explain(states(paths, [0, 1]))
    assert explanation.cause.culprits == ()
    assert "rank 0 calls broadcast (/job/train.py:20)" in explanation.cause.summary
    assert f"rank 1 calls barrier ({BARRIER})" in explanation.cause.summary
    assert "odd one" not in explanation.cause.summary
    failure = Failure(1, 109.0, exc_type="RuntimeError", message=GLOO)
    report = format_report([failure], paths, explanation=explanation)
    assert report.startswith(
        "mldebug: no single rank to blame: ranks make different collectives as call #4"
    )


def test_a_call_that_raised_is_where_a_timed_out_rank_waited(paths):
    # The agent counts a call that raised as ended (with its error): for a rank that died of
    # a timeout, its last call is the one it waited in.
    write_calls(paths, 0, [("all_reduce", AR)] * 4, waiting=False)
    write_calls(paths, 1, [("all_reduce", AR)] * 3 + [("barrier", BARRIER)], waiting=False)
    timeouts = {0: timeout_of(GLOO), 1: timeout_of(GLOO)}
    explanation = explain(states(paths, [0, 1]), timeouts=timeouts)
    assert explanation.cause.culprits == (0,)
    assert explanation.waits[1] == (
        f"rank 1: waiting in barrier #4 of default_pg at {BARRIER} when it timed out"
    )


def test_a_call_a_peers_exit_broke_is_where_the_rank_waited(paths):
    # Rank 1's timer fired first and it died; rank 0's all_reduce then raised (the peer closed
    # the connection), not a timeout. The agent counts that call as ended, with its error:
    # rank 0 still waited in it, it was not "in no collective".
    broken = "RuntimeError: [gloo/transport/tcp/pair.cc:534] Connection closed by peer"
    made = [Made("all_reduce", AR, 100.0 + seq, 100.5 + seq) for seq in range(1, 4)]
    made.append(Made("all_reduce", AR, 104.0, 110.0, error=broken))
    write_state(paths, 0, {"default_pg": made}, now=111.0, sizes={"default_pg": 2})
    write_calls(paths, 1, [("all_reduce", AR)] * 3 + [("barrier", BARRIER)], waiting=False)
    explanation = explain(
        states(paths, [0, 1]), died={0: 110.0, 1: 109.0}, timeouts={1: timeout_of(GLOO)}
    )
    assert explanation.cause.culprits == (0,)
    assert explanation.waits[0] == (
        f"rank 0: waiting in all_reduce #4 of default_pg at {AR} (for 6.0s) until it raised"
    )


def test_every_rank_in_the_same_call_is_no_rank_s_fault(paths):
    write_calls(paths, 0, [("all_reduce", AR)] * 4)
    write_calls(paths, 1, [("all_reduce", AR)] * 4)
    cause = explain(states(paths, [0, 1])).cause
    assert cause.culprits == () and cause.recipe == "collective-hang"
    assert cause.summary.startswith(
        "all 2 ranks made all_reduce #4 and none has seen it complete, and none is behind"
    )
    assert cause.summary.endswith(f"; it was called at {AR}")


def test_the_report_leads_with_the_cause_not_with_the_rank_whose_timer_fired_first(paths):
    write_calls(paths, 0, [("all_reduce", AR)] * 4)
    write_calls(paths, 1, [("all_reduce", AR)] * 3 + [("barrier", BARRIER)])
    explanation = explain(states(paths, [0, 1]))
    failures = [
        Failure(1, 109.0, exc_type="RuntimeError", message=GLOO, user_location=BARRIER),
        Failure(0, 109.1, exc_type="RuntimeError", message=GLOO, user_location=AR),
    ]
    lines = format_report(failures, paths, explanation=explanation).splitlines()
    assert lines[0].startswith("mldebug: root cause: ranks make different collectives as call #4")
    assert lines[1] == "  what each rank was waiting in when the job failed:"
    assert lines[2].startswith("    rank 0: waiting in all_reduce #4")
    assert lines[4].startswith("  first failure: rank 1: RuntimeError: [")
    assert "a timeout says how the hang ended, not what caused it" in lines[4]
    assert lines[5] == f"    raised at {BARRIER}"
    assert lines[-2] == f"  full output: {paths.rank_dir(0)}/stderr.log"  # the culprit's
    assert lines[-1] == "  what to do next: mldebug recipes mismatched-collectives"


def test_timeouts_are_told_by_their_gloo_and_nccl_messages():
    assert timeout_of(f"RuntimeError: {GLOO}").text.startswith("Timed out waiting 5000ms")
    nccl = timeout_of("other lines\n" + NCCL)
    assert (nccl.nccl_seq, nccl.nccl_op) == (120049, "_ALLGATHER_BASE")
    blocking = timeout_of(
        "[Rank 1] Work WorkNCCL(SeqNum=2521, OpType=ALLREDUCE, NumelIn=160672064, "
        "NumelOut=160672064, Timeout(ms)=600000) timed out in blocking wait."
    )
    assert (blocking.nccl_seq, blocking.nccl_op) == (2521, "ALLREDUCE")
    assert timeout_of("Connection closed by peer [127.0.0.1]:13731") is None
    assert timeout_of("ValueError: rank 1 gives up", "") is None


def test_without_agent_states_each_rank_says_where_it_timed_out_and_a_rank_elsewhere_is_named():
    timeouts = {0: timeout_of(NCCL), 2: timeout_of(GLOO)}
    where = {1: Place("load_batch (/job/data.py:40)", None)}
    explanation = explain(
        {0: None, 1: None, 2: None}, where=where, timeouts=timeouts, raised={2: AR}
    )
    assert explanation.cause.culprits == (1,)
    assert (
        "rank 1 never joined the collective that ranks 0,2 timed out in"
        in explanation.cause.summary
    )
    assert explanation.waits == (
        "rank 0: timed out waiting in _ALLGATHER_BASE (NCCL SeqNum 120049)",
        "rank 1: did not time out; in no collective, in load_batch (/job/data.py:40)",
        f"rank 2: timed out waiting in a collective called at {AR}",
    )


# -- the book's example, run for real ------------------------------------------------------

JOB = Path(__file__).parent / "jobs" / "one_more_all_reduce.py"
SOURCE = JOB.read_text().splitlines()
AR_LINE = next(i for i, line in enumerate(SOURCE, 1) if line.endswith("# ALL_REDUCE"))
BARRIER_LINE = next(i for i, line in enumerate(SOURCE, 1) if line.endswith("# BARRIER"))


@pytest.fixture(scope="module")
def book_job(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("book")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mldebug",
            "run",
            "--run-dir",
            str(tmp / "run"),
            "--nproc-per-node",
            "2",
            str(JOB),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, out.decode(), err.decode(), RunPaths(tmp / "run")


def report_of(err: str) -> list[str]:
    lines = err.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("mldebug: root cause"))
    return lines[start:]


@pytest.mark.multirank
def test_the_books_example_run_on_gloo_names_rank_0s_extra_all_reduce(book_job):
    code, _out, err, paths = book_job
    assert code == 1, err
    report = report_of(err)
    head = report[0]
    seq = re.search(r"ranks make different collectives as call #(\d+), which never match", head)
    assert seq, head
    n = seq.group(1)
    assert f"rank 0 calls all_reduce ({JOB}:{AR_LINE})" in head
    assert f"rank 1 calls barrier ({JOB}:{BARRIER_LINE})" in head
    assert head.endswith("rank 0 made one all_reduce more than the others (a loop ran once more)")
    waits = [line.strip() for line in report if line.startswith("    rank ")]
    assert waits[0].startswith(
        f"rank 0: waiting in all_reduce #{n} of default_pg at {JOB}:{AR_LINE}"
    )
    assert waits[1].startswith(
        f"rank 1: waiting in barrier #{n} of default_pg at {JOB}:{BARRIER_LINE}"
    )
    first = next(line for line in report if line.startswith("  first failure:"))
    assert "Timed out waiting 5000ms" in first
    assert report[-1] == "  what to do next: mldebug recipes mismatched-collectives"
    cause = json.loads(paths.manifest.read_text())["first_failure"]["root_cause"]
    assert cause["ranks"] == [0] and cause["location"] == f"{JOB}:{AR_LINE}"


@pytest.mark.multirank
def test_the_books_example_with_the_real_agent(book_job):
    code, out, err, _paths = book_job
    if "agent: contract" in out:
        pytest.skip("the in-rank agent wrote no state.json: a stand-in wrote it (H6's agent)")
    assert "agent: real" in out
    assert "rank 0 made one all_reduce more than the others (a loop" in report_of(err)[0]


# -- NCCL's watchdog, as its documented lines say it (no GPU here) ----------------------------

NCCL_JOB = """\
import os, sys, time

def wait_for_checkpoint():
    time.sleep(600)  # WAIT

if os.environ["RANK"] == "0":
    # Rank 1 has long been elsewhere when NCCL's watchdog fires: wait until it is (a loaded
    # machine may start it seconds later).
    for _ in range(600):
        if os.path.exists("rank1-elsewhere"):
            break
        time.sleep(0.1)
    time.sleep(0.5)
    sys.stderr.write(
        "[rank0]:[E626 05:06:30.929096625 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=4, "
        "NumelOut=4, Timeout(ms)=5000) ran for 5001 milliseconds before timing out.\\n"
    )
    sys.stderr.flush()
    os.abort()  # what NCCL's watchdog does: no Python exception, SIGABRT
open("rank1-elsewhere", "w").close()
wait_for_checkpoint()
"""
NCCL_WAIT_LINE = NCCL_JOB.splitlines().index("    time.sleep(600)  # WAIT") + 1


@pytest.mark.multirank
def test_a_rank_aborted_by_nccls_watchdog_is_a_timeout_and_the_rank_elsewhere_is_named(tmp_path):
    (tmp_path / "job.py").write_text(NCCL_JOB)
    done = subprocess.run(
        [sys.executable, "-m", "mldebug", "run", "--run-dir", str(tmp_path / "run"),
         "--nproc-per-node", "2", "job.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 128 + signal.SIGABRT, done.stderr
    report = report_of(done.stderr)
    where = f"wait_for_checkpoint ({tmp_path / 'job.py'}:{NCCL_WAIT_LINE})"
    assert report[0] == (
        "mldebug: root cause: rank 1 never joined the collective that rank 0 timed out in: "
        f"last seen outside any collective, in {where}"
    ), done.stderr
    assert "    rank 0: timed out waiting in ALLREDUCE (NCCL SeqNum 5)" in report
    assert f"    rank 1: in no collective, in {where}" in report
    assert any(line.startswith("  first failure: rank 0") and "aborted" in line for line in report)
