"""The failure report never fails, and the job's exit code always comes out of `mldebug run`.

Error files (and the hosts that come from proc.json) are input: any JSON value in any field
must give a report, never an exception that would leave the job's exit code behind.
"""

import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mldebug.files.rundir import RunPaths, create_run_dir
from mldebug.launch.failures import (
    collect_failures,
    failure_from_error_file,
    format_report,
    job_outcome,
)
from mldebug.launch.spec import LaunchSpec
from mldebug.launch.supervisor import Supervisor

MLDEBUG = [sys.executable, "-m", "mldebug"]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=10**308, max_value=10**400)  # too large for a float
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=8,
)
FIELDS = ("type", "message", "time", "host", "location", "user_location", "traceback", "pid")
error_files = st.one_of(
    json_values,
    st.fixed_dictionaries({}, optional={name: json_values for name in FIELDS}),
    st.fixed_dictionaries(
        {"type": st.text(min_size=1, max_size=10)}, optional={"time": json_values}
    ),
    st.sampled_from(['{"type": "E", "time": 1e400}', '{"type": "E", "time": -1e400}', "{", ""]),
)
returncodes = st.integers(min_value=-64, max_value=255)
times = st.floats(allow_nan=True, allow_infinity=True)
RANKS = range(3)


def write_error_file(paths: RunPaths, rank: int, content) -> None:
    paths.rank_dir(rank).mkdir(parents=True, exist_ok=True)
    text = content if isinstance(content, str) else json.dumps(content)
    paths.error_file(rank).write_text(text)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    errors=st.dictionaries(st.sampled_from(RANKS), error_files),
    exits=st.dictionaries(st.sampled_from(RANKS), st.tuples(returncodes, times)),
    hosts=st.dictionaries(st.sampled_from(RANKS), json_values),
    vanished=st.dictionaries(st.sampled_from(RANKS), times),
    stopped=st.sets(st.sampled_from(RANKS)),
    stop_signal=st.none() | st.sampled_from([0, signal.SIGINT, signal.SIGTERM]),
    launcher=st.none() | returncodes,
)
def test_the_failure_report_never_raises(
    errors, exits, hosts, vanished, stopped, stop_signal, launcher
):
    with tempfile.TemporaryDirectory() as tmp:
        paths = RunPaths(Path(tmp))
        for rank, content in errors.items():
            write_error_file(paths, rank, content)
        failures = collect_failures(paths, exits, stopped, hosts, vanished)
        for failure in failures:
            assert isinstance(failure.time, float) and math.isfinite(failure.time)
            for name in ("host", "how", "exc_type", "message", "location", "traceback"):
                assert isinstance(getattr(failure, name), str)
            json.dumps(failure.to_json(), allow_nan=False)  # run.json stays strict JSON
        assert isinstance(format_report(failures, paths, sorted(stopped)), str)
        code, status, reported = job_outcome(failures, stop_signal, launcher)
    assert isinstance(code, int) and 0 <= code <= 255
    failed = [r for r, (rc, _) in exits.items() if rc != 0 and r not in stopped]
    if stop_signal is None and launcher is None:
        # A rank that exited non-zero by itself fails the job, whatever its files say.
        assert (code != 0) == bool(failures)
        assert not failed or code != 0


def test_a_bad_time_in_an_error_file_falls_back_to_when_the_rank_was_seen(tmp_path):
    paths = RunPaths(tmp_path)
    write_error_file(paths, 0, {"type": "ValueError", "message": "m", "time": "soon"})
    write_error_file(paths, 1, {"type": "KeyError", "message": ["x"], "time": 10**400})
    failures = collect_failures(paths, {0: (3, 20.0), 1: (1, 10.0)})
    assert [(f.rank, f.time, f.exc_type, f.message) for f in failures] == [
        (1, 10.0, "KeyError", ""),
        (0, 20.0, "ValueError", "m"),
    ]
    assert job_outcome(failures, None, None)[0] == 1


def test_a_failure_while_summing_up_keeps_the_jobs_exit_code(tmp_path, monkeypatch):
    """Whatever breaks in the report, wait() gives the rank's code, run.json gets its final
    status, and the failure is said in one line."""
    monkeypatch.setenv("MLDEBUG_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.delenv("MLDEBUG_DEBUG", raising=False)
    (tmp_path / "job.py").write_text("import sys\nsys.exit(3)\n")

    def broken(*args, **kwargs):
        raise RuntimeError("the report broke")

    monkeypatch.setattr("mldebug.launch.children.collect_failures", broken)
    paths = create_run_dir(tmp_path / "run")
    supervisor = Supervisor(
        LaunchSpec(paths=paths, command=[sys.executable, str(tmp_path / "job.py")], console=None)
    )
    supervisor.start()
    assert supervisor.wait(timeout=120) == 3
    manifest = json.loads(paths.manifest.read_text())
    assert (manifest["status"], manifest["exit_code"]) == ("failed", 3)
    said = [text for text in supervisor.unshown if "internal error" in text]
    assert said == [
        "mldebug: internal error while summing up the run (RuntimeError: the report broke); "
        "the job's exit code is kept. This is a bug in mldebug: please report it."
    ]


POISONED = """
    import json, os, sys
    error = os.path.join(os.environ["MLDEBUG_RUN_DIR"], "ranks", "0", "error.json")
    with open(error, "w") as handle:
        handle.write({poison!r})
    print("rank 0 wrote a poisoned error file", flush=True)
    sys.exit(3)
"""


@pytest.mark.parametrize(
    "poison",
    [
        '{"type": "ValueError", "time": "soon"}',
        '{"type": "ValueError", "time": [1, 2]}',
        '{"type": "ValueError", "time": 1e400, "message": {"a": 1}}',
        '{"type": ["ValueError"], "host": 7}',
    ],
)
def test_mldebug_run_exits_with_the_ranks_code_whatever_its_error_file_says(tmp_path, poison):
    (tmp_path / "job.py").write_text(textwrap.dedent(POISONED.format(poison=poison)))
    done = subprocess.run(
        [*MLDEBUG, "run", "--run-dir", str(tmp_path / "run"), str(tmp_path / "job.py")],
        cwd=tmp_path,
        env={**os.environ, "MLDEBUG_RUNS_DIR": str(tmp_path / "runs")},
        capture_output=True,
        timeout=120,
    )
    err = done.stderr.decode()
    assert done.returncode == 3, err
    assert "rank 0 wrote a poisoned error file" in done.stdout.decode()
    assert "root cause (first failure): rank 0" in err
    assert "Traceback" not in err and "internal error" not in err
    manifest = json.loads((tmp_path / "run" / "run.json").read_text())
    assert (manifest["status"], manifest["exit_code"]) == ("failed", 3)


def test_the_report_puts_no_escape_sequence_of_a_rank_on_the_terminal(tmp_path):
    # GIVEN an error file whose message, location and traceback carry terminal sequences
    paths = RunPaths(tmp_path)
    hostile = "\x1b[2J\x1b]0;pwned\x07\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\ \x9b31m"
    failure = failure_from_error_file(
        {
            "type": "RuntimeError",
            "message": f"bad {hostile} shard",
            "host": f"node{hostile}",
            "location": f"/job/train.py{hostile}:3",
            "traceback": f"Traceback (most recent call last):\n  {hostile}\nRuntimeError",
            "time": 1.0,
        },
        rank=1,
    )
    # WHEN the first-failure report is written
    report = format_report([failure], paths)
    # THEN the words are there, and no escape or control character is
    assert "RuntimeError: bad" in report and "link" in report and "shard" in report
    assert not any(c in report for c in "\x1b\x07\x9b")


def test_a_rank_that_ran_out_of_cuda_memory_points_at_what_its_agent_saved(tmp_path):
    # GIVEN rank 1 died of a CUDA OOM (the message recorded on an H200), and its agent left
    # the allocator's summary and snapshot in its folder, as it does before the error rises
    recorded = Path(__file__).parent / "data" / "gpu" / "memory"
    paths = RunPaths(tmp_path)
    folder = paths.rank_dir(1)
    folder.mkdir(parents=True)
    (folder / "memory_summary.txt").write_text((recorded / "memory_summary.txt").read_text())
    (folder / "memory_snapshot.pickle").write_bytes(b"\x80\x04N.")
    failure = failure_from_error_file(
        {
            "type": "OutOfMemoryError",
            "message": (recorded / "oom_message.txt").read_text(),
            "time": 1.0,
            "location": "/job/train.py:40",
        },
        rank=1,
    )
    # WHEN the first-failure report is written, THEN it says where those files are
    report = format_report([failure], paths)
    assert "OutOfMemoryError: CUDA out of memory. Tried to allocate 400.00 GiB" in report
    assert f"CUDA memory when it ran out: {folder / 'memory_summary.txt'}" in report
    assert f"allocator snapshot (drag it into https://pytorch.org/memory_viz): {folder}" in report


@pytest.mark.parametrize(
    ("failure", "recipe"),
    [
        (dict(exc_type="RuntimeError", message="boom"), "rank-crash"),
        (dict(exc_type="torch.OutOfMemoryError", message="CUDA out of memory."), "cuda-oom"),
        (dict(exc_type="mldebug.tiny.TinyModelError", message="gpt9"), "tiny-model-repro"),
        (dict(exit_code=128 + signal.SIGSEGV, how="segmentation fault"), "native-crash"),
        (dict(exit_code=128 + signal.SIGABRT, how="aborted"), "native-crash"),
        (dict(exit_code=128 + signal.SIGKILL, how="killed"), "rank-crash"),  # OOM killer, kill -9
    ],
)
def test_the_first_failure_names_the_recipe_for_how_the_rank_failed(tmp_path, failure, recipe):
    from mldebug.launch.failures import Failure

    first = Failure(rank=1, time=0.0, **failure)
    report = format_report([first], RunPaths(tmp_path / "run"))
    assert report.splitlines()[-1] == f"  what to do next: mldebug recipes {recipe}"
    assert first.to_json()["recipe"] == recipe


def test_the_jobs_code_is_never_the_signal_mldebug_sent_a_rank_that_was_ending(tmp_path):
    # Both ranks timed out; rank 0 raised first but was still ending when rank 1 exited
    # with 1, and mldebug's SIGTERM ended it (143): the job's code is 1, not 143.
    paths = RunPaths(tmp_path / "run")
    for rank, when in ((0, 100.0), (1, 100.1)):
        write_error_file(
            paths, rank, {"type": "RuntimeError", "message": "timed out", "time": when}
        )
    exits = {0: (-signal.SIGTERM, 101.0), 1: (1, 100.2)}
    failures = collect_failures(paths, exits, stopped={0})
    assert [f.rank for f in failures] == [0, 1]
    assert job_outcome(failures, None, None)[0] == 1
    alone = collect_failures(paths, {0: (-signal.SIGTERM, 101.0)}, stopped={0})
    assert job_outcome(alone, None, None)[0] == 1


def test_a_rank_killed_by_a_signal_comes_before_the_peer_it_left_with_a_closed_connection(
    tmp_path,
):
    # Rank 1 aborted; rank 0's barrier raised "Connection closed by peer" at once, while the
    # supervisor saw rank 1 dead a moment later. The root cause is rank 1.
    paths = RunPaths(tmp_path / "run")
    closed = (
        "[gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:25813. This "
        "is typically caused by a remote worker crashing."
    )
    write_error_file(paths, 0, {"type": "RuntimeError", "message": closed, "time": 100.0})
    exits = {0: (1, 100.1), 1: (-signal.SIGABRT, 100.3)}
    failures = collect_failures(paths, exits)
    assert [f.rank for f in failures] == [1, 0]
    assert format_report(failures, paths).startswith(
        "mldebug: root cause (first failure): rank 1: aborted (SIGABRT)"
    )
    # An error long before the other failure stays first.
    failures = collect_failures(paths, {0: (1, 100.1), 1: (-signal.SIGABRT, 130.0)})
    assert [f.rank for f in failures] == [0, 1]
