"""A rank the node starves of CPU is not a frozen rank; a rank whose C code holds the GIL is.

One real job under `mldebug run`, 2 plain-Python ranks (no torch: the agent's heartbeat is
what is judged). Once both are in place:
  * rank 0 is moved into a cgroup with a CPU quota of a thousandth of a core, then works:
    16 threads in C code and a main thread that steps. The kernel keeps its threads waiting
    for a CPU, and its heartbeat stops for many seconds, as on a node whose cores other work
    has taken;
  * rank 1 calls C code that sleeps for an hour holding the GIL (a C call blocked on a lock,
    through ctypes.PyDLL): its heartbeat's thread could run, but never gets the GIL.
THEN, once both heartbeats are older than the frozen rule's 10 s, `mldebug dump` names rank
1 frozen, and rank 0 not (its threads' run-queue delay, from the agent's state and from
/proc, covers its heartbeat's silence: agent/heartbeat.py, collect/agentstate.py).
"""

from __future__ import annotations

import json
import os
import textwrap
import time

import pytest
from testkit.cgroups import cpu_cgroup
from testkit.jobs import dump_json, start, stop, wait_ready

pytestmark = [pytest.mark.timeout(300)]

JOB = textwrap.dedent(
    """\
    import ctypes
    import hashlib
    import os
    import threading
    import time

    rank = int(os.environ["RANK"])
    print("READY", flush=True)
    while not os.path.exists(os.environ["GO_FILE"]):
        time.sleep(0.1)
    if rank == 1:
        ctypes.PyDLL(None).sleep(3600)  # FROZEN_LINE: an hour in C code holding the GIL
    data = b"x" * (1 << 20)


    def hashing():
        while True:
            hashlib.sha256(data).digest()  # C code, the GIL released


    for _ in range(16):  # a rank's worker threads (intra-op, loader, communication)
        threading.Thread(target=hashing, daemon=True).start()
    while True:
        sum(range(100_000))  # a step's work: a few ms of CPU
        time.sleep(0.01)
    """
)
QUOTA = (1_000, 1_000_000)  # microseconds of CPU per period: a thousandth of one core
FROZEN_AFTER = 10.0  # analysis/sequence.py frozen_after at a 1 s heartbeat


def _pid(run_dir, rank: int) -> int:
    return json.loads((run_dir / "ranks" / str(rank) / "proc.json").read_text())["pid"]


def _age(run_dir, rank: int) -> float:
    return (
        time.time() - json.loads((run_dir / "ranks" / str(rank) / "state.json").read_text())["time"]
    )


def test_a_starved_rank_is_not_frozen_and_a_rank_holding_the_gil_is(tmp_path):
    group = cpu_cgroup(f"mldebug-starved-test-{os.getpid()}", *QUOTA)
    if group is None:
        pytest.skip(
            "no writable cgroup CPU controller here (v1 cpu or v2 cpu.max) to starve a rank"
        )
    script = tmp_path / "job.py"
    script.write_text(JOB)
    go = tmp_path / "go"
    proc, run_dir = start(tmp_path, script, 2, env={"GO_FILE": str(go)})
    try:
        wait_ready(proc, run_dir, 2)
        (group / "cgroup.procs").write_text(str(_pid(run_dir, 0)))  # every thread of rank 0
        go.touch()
        deadline = time.monotonic() + 120
        while min(_age(run_dir, 0), _age(run_dir, 1)) < FROZEN_AFTER + 3:
            assert time.monotonic() < deadline, (_age(run_dir, 0), _age(run_dir, 1))
            time.sleep(1)
        _code, report = dump_json(run_dir)
        frozen = [f for f in report["findings"] if f["kind"] == "frozen"]
        assert [f["ranks"] for f in frozen] == [[1]], report["findings"]
        assert frozen[0]["severity"] == "error"
        assert frozen[0]["location"].endswith(f"job.py:{_line('FROZEN_LINE')}"), frozen[0]
    finally:
        for pid in (group / "cgroup.procs").read_text().split():
            (group.parent / "cgroup.procs").write_text(pid)
        group.rmdir()
        stop(proc)


def _line(marker: str) -> int:
    return next(i for i, line in enumerate(JOB.splitlines(), 1) if marker in line)
