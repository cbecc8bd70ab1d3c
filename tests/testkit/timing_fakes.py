"""A slow job for the TUI tests: 4 ranks whose agents' timing windows (the agent's
state.json format, tests/timing_sim.py) say rank 3 computes 1.5x as long, turned into a
snapshot by the real analysis (build_snapshot). Fixed times: snapshots do not depend on
the clock."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/timing_sim.py

from timing_sim import simulate, snapshot  # noqa: E402

from mldebug.model import JobSnapshot  # noqa: E402


def slow_job(tick: int = 0, factor: float = 1.5) -> JobSnapshot:
    return snapshot(simulate(world=4, slow_rank=3, factor=factor, jitter=0.1, steps=40, seed=7))


def healthy_job(tick: int = 0) -> JobSnapshot:
    return snapshot(simulate(world=4, jitter=0.1, steps=40, checkpoint_every=25, seed=7))
