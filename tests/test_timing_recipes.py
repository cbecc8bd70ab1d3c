"""The slow-job recipes are what search finds for the slow-job findings' own lines (as
analysis/timing.py words them) and for torch's sync-debug warning."""

from __future__ import annotations

import pytest
from timing_sim import simulate, views

from mldebug.analysis.timing import judge_timing
from mldebug.recipes.search import search


def best(line: str) -> str:
    return search(line)[0].recipe.id


@pytest.mark.parametrize(
    ("states", "expected"),
    [
        (simulate(world=4, slow_rank=3, factor=1.5, jitter=0.1, steps=20), "stragglers"),
        (simulate(world=4, slow_rank=2, data=0.03, data_factor=2.0, steps=20), "input-bound"),
        (simulate(world=4, data=0.05, compute=0.04, steps=40), "input-bound"),
        (simulate(world=2, compute=0.03, sync=0.04, steps=20), "host-sync"),
    ],
)
def test_a_findings_summary_finds_its_own_recipe_first(states, expected):
    (finding,) = judge_timing(views(states)).findings
    assert finding.recipe == expected
    assert best(finding.summary) == expected


def test_torchs_sync_debug_warning_finds_host_sync():
    # torch.cuda.set_sync_debug_mode("warn") prints this for each synchronizing call.
    line = (
        "UserWarning: called a synchronizing CUDA operation (Triggered internally at Context.cpp)"
    )
    assert best(line) == "host-sync"
