"""Stand-ins for py-spy (never for the analysis) and cheap live processes to point them at.

`fake_pyspy` writes a script that answers `py-spy dump --json --pid PID` like the real one,
appends the pid to a log file per call (so tests count the readings), and can be made to
hang like py-spy on a frozen process.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

FRAMES = [
    {"name": "wait_for_peers", "filename": "/job/train.py", "module": None, "line": 7},
    {"name": "<module>", "filename": "/job/train.py", "module": None, "line": 20},
]


def fake_pyspy(folder: Path, *, hang: bool = False) -> tuple[str, Path]:
    """(path of the fake py-spy, path of its call log: one pid per line)."""
    log = folder / "pyspy-calls.log"
    log.touch()
    answer = json.dumps(
        [
            {
                "thread_id": 1,
                "thread_name": "MainThread",
                "os_thread_id": 1,
                "active": False,
                "owns_gil": False,
                "frames": FRAMES,
            }
        ]
    )
    script = folder / "py-spy"
    body = "exec sleep 600\n" if hang else f"cat <<'EOF'\n{answer}\nEOF\n"
    # The pid is the 4th argument: py-spy dump --json --pid PID [...]
    script.write_text(f'#!/bin/sh\necho "$4" >> {log}\n{body}')
    script.chmod(0o755)
    return str(script), log


def calls(log: Path) -> list[int]:
    return [int(line) for line in log.read_text().split()]


def sleepers(count: int, run_dir: Path | None = None) -> list[subprocess.Popen]:
    """`count` idle processes to point py-spy at (what they run does not matter to a fake).

    With `run_dir`, they carry the environment `mldebug run` gives its ranks, which is how a
    run directory's ranks are told from other processes it may name.
    """
    procs = []
    for rank in range(count):
        env = dict(os.environ)
        if run_dir is not None:
            env.update(
                MLDEBUG_RUN_DIR=str(run_dir),
                RANK=str(rank),
                LOCAL_RANK=str(rank),
                WORLD_SIZE=str(count),
            )
        procs.append(subprocess.Popen(["sleep", "600"], env=env))
    return procs


def stop(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        proc.kill()
    for proc in procs:
        proc.wait()
