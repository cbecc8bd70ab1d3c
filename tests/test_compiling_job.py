"""A real 2-rank gloo job where rank 1 compiles with torch.compile (inductor, the system C++
compiler) for longer than `--hang-timeout` while rank 0 waits for it in all_reduce.

examples/compile_rank.py, under `mldebug run --hang-timeout 4 --on-hang stop`, with a fresh
TORCHINDUCTOR_CACHE_DIR so the compile is real and cold (10 layers, one compile thread: about
20 s of CPU):

  * the watchdog looks, says rank 1 is compiling, "not a hang", and never stops the job: it
    ends by itself with exit code 0 and no hang in run.json;
  * `mldebug dump` during the compile names rank 1 compiling, rank 0 waiting for it, how long
    so far (from rank 1's agent), and holds no error;
  * once compiled, the job runs the compiled model: `dump` finds no rank compiling and no
    warning (running compiled code is not compiling).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from testkit.jobs import dump_here

pytestmark = [pytest.mark.long, pytest.mark.multirank, pytest.mark.timeout(600)]

EXAMPLE = Path(__file__).parent.parent / "examples" / "compile_rank.py"
HANG_TIMEOUT = 4
LINES = EXAMPLE.read_text().splitlines()
# Where rank 1 compiles: `torch.compile(model)` (its set-up imports inductor), the first
# call (the forward graph), its first backward (aot_autograd compiles the backward graph then).
COMPILE_LINES = {
    next(i for i, line in enumerate(LINES, 1) if marker in line)
    for marker in ("run = torch.compile(model)", "loss = run(", "loss.backward()")
}


def _log(run_dir: Path, rank: int) -> str:
    path = run_dir / "ranks" / str(rank) / "stdout.log"
    return path.read_text() if path.exists() else ""


def _dump(run_dir: Path) -> dict | None:
    """`mldebug dump --run DIR --json` (in this process); None when the job ended meanwhile
    (exit 3)."""
    code, printed = dump_here(run_dir, "--json")
    if code == 3:
        return None
    assert code in (0, 1), (code, printed[-2000:])
    return json.loads(printed)


def _compiling(report: dict) -> dict | None:
    return next((f for f in report["findings"] if f["kind"] == "compiling"), None)


def _seconds(finding: dict) -> float | None:
    facts = dict(finding.get("facts") or [])
    value = facts.get("compiling for")
    return float(value.split()[0]) if value else None


def _start(tmp: Path, name: str, *options: str) -> tuple[subprocess.Popen, Path, object]:
    run_dir = tmp / name
    env = {**os.environ, "NO_COLOR": "1", "TORCHINDUCTOR_CACHE_DIR": str(tmp / "inductor")}
    # One compile thread: no pool of worker processes importing torch beside the job; the
    # compile stays far longer than the watchdog's timeout.
    env["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
    console = open(tmp / f"{name}.txt", "w+")  # noqa: SIM115 (read after the job ended)
    process = subprocess.Popen(
        [sys.executable, "-m", "mldebug", "run", "--nproc-per-node", "2"]
        + ["--run-dir", str(run_dir), "--hang-timeout", str(HANG_TIMEOUT), "--on-hang", "stop"]
        + [str(EXAMPLE), "--steps", "300", "--step-ms", "30", *options],
        cwd=tmp,
        env=env,
        stdout=console,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    return process, run_dir, console


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """Both jobs start together (their torch imports overlap): `compiling` (rank 1 compiles
    at step 5) and `healthy` (no rank compiles: `--compile-rank -1`), dumped all along."""
    tmp = tmp_path_factory.mktemp("compiling")
    process, run_dir, console = _start(tmp, "compiling", "--compile-at", "5", "--layers", "10")
    healthy, healthy_dir, healthy_console = _start(tmp, "healthy", "--compile-rank", "-1")
    seen: dict = {"during": [], "after": [], "healthy": []}
    healthy_dumped = [0.0]

    def dump_healthy() -> None:
        """Every 3 s: often enough to look in each phase, rarely enough to leave the CPU to
        the compile."""
        if time.monotonic() - healthy_dumped[0] < 3:
            return
        if healthy.poll() is None and (healthy_dir / "ranks").exists():
            healthy_dumped[0] = time.monotonic()
            report = _dump(healthy_dir)
            if report is not None:
                seen["healthy"].append(report)

    try:
        deadline = time.monotonic() + 540
        while "READY" not in _log(run_dir, 1) and process.poll() is None:
            assert time.monotonic() < deadline, "the job never got ready"
            dump_healthy()
            time.sleep(0.5)
        # While rank 1 compiles: dump until one says it has compiled twice the watchdog's
        # timeout (then the watchdog has looked, too).
        while "COMPILED" not in _log(run_dir, 1) and process.poll() is None:
            assert time.monotonic() < deadline, "rank 1 never finished compiling"
            dump_healthy()
            last = _compiling(seen["during"][-1]) if seen["during"] else None
            if last is not None and (_seconds(last) or 0) > 2 * HANG_TIMEOUT:
                time.sleep(1)
                continue
            report = _dump(run_dir)
            if report is not None and "COMPILED" not in _log(run_dir, 1):
                seen["during"].append(report)
            time.sleep(1)
        # Compiled: the job runs the compiled model until its last step.
        for _ in range(2):
            report = _dump(run_dir)
            if report is not None:
                seen["after"].append(report)
        seen["exit"] = process.wait(timeout=max(30, deadline - time.monotonic()))
        seen["healthy_exit"] = healthy.wait(timeout=max(30, deadline - time.monotonic()))
        for name, handle in (("console", console), ("healthy_console", healthy_console)):
            handle.seek(0)
            seen[name] = handle.read()
        seen["run"] = json.loads((run_dir / "run.json").read_text())
        yield seen
    finally:
        for each in (process, healthy):
            if each.poll() is None:
                os.killpg(each.pid, 15)
                each.wait(timeout=30)
        console.close()
        healthy_console.close()


def test_a_rank_compiling_longer_than_the_hang_timeout_is_not_stopped(job):
    console = job["console"]
    assert job["exit"] == 0, console
    assert "stopping the job" not in console and "job stopped" not in console, console
    assert not job["run"].get("hangs"), job["run"]
    # The watchdog looked while rank 1 compiled, and said so.
    assert "not a hang: rank 1 is compiling" in console, console


def test_dump_during_the_compile_says_compiling_and_holds_no_error(job):
    during = job["during"]
    assert during, "no dump was taken while rank 1 compiled"
    for report in during:
        errors = [f["summary"] for f in report["findings"] if f["severity"] == "error"]
        assert not errors, errors
    named = [_compiling(r) for r in during if _compiling(r) is not None]
    assert named, [r["findings"] for r in during]
    last = named[-1]
    assert last["ranks"] == [1] and last["severity"] == "info"
    assert last["waiting"] == [0], last
    # torch.compile's set-up, dynamo, inductor: whichever rank 1 was in then
    assert dict(last["facts"])["compile phase"].startswith("torch"), last
    # How long so far comes from rank 1's agent, and passed the watchdog's timeout.
    assert (_seconds(last) or 0) > HANG_TIMEOUT, last
    assert last["location"] in {f"{EXAMPLE.resolve()}:{n}" for n in COMPILE_LINES}, last


def test_running_the_compiled_model_is_not_compiling(job):
    # Rank 0 runs eager and rank 1 compiled: a straggler finding may rightly name rank 0.
    # What the compile leaves behind must not be a verdict: no compiling rank, no error, and
    # the memory the compile took is no growth.
    after = job["after"]
    assert after, "the job ended before a dump after its compile"
    for report in after:
        assert _compiling(report) is None, report["findings"]
        kinds = {f["kind"] for f in report["findings"] if f["severity"] != "info"}
        assert not kinds & {"memory_growth", "frozen", "stuck", "outlier"}, report["findings"]
        assert all(f["severity"] != "error" for f in report["findings"]), report["findings"]


def test_a_job_that_compiles_nothing_is_never_said_to_compile(job):
    # Dumped from its start (the optimizer's constructor imports torch._dynamo: an import
    # is no compile) to its end.
    healthy = job["healthy"]
    assert len(healthy) >= 3, len(healthy)
    for report in healthy:
        assert _compiling(report) is None, report["findings"]
        assert all(f["severity"] != "error" for f in report["findings"]), report["findings"]
    assert job["healthy_exit"] == 0, job["healthy_console"]
    console = job["healthy_console"]
    assert " is compiling" not in console and " are compiling" not in console, console
