"""`mldebug explain` on the wide corpus (tests/data/explain_corpus/manifest.json): pastes
modelled on public threads of many projects, in every pasting style, each labelled from its
thread's outcome before explain ran on it. The top finding's kind and recipe must be the
label; a healthy paste must get no warning and no error.

The cases explain gets wrong are listed in MISSES with why: they are expected to fail
(strict), so one that starts passing is noticed and taken off the list.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mldebug.explain.engine import explain_text
from mldebug.recipes import load_recipes

CORPUS = Path(__file__).resolve().parent / "data" / "explain_corpus"
CASES = json.loads((CORPUS / "manifest.json").read_text())["cases"]
RECIPES = {recipe.id for recipe in load_recipes()}
HEALTHY = "healthy"

MISSES = {
    "timeout_rs_base_missing.log": "the paste never names rank 7 nor the world size: no rank "
    "can be said absent",
    "timeout_rs_base_missing_hostrank.log": "the same paste with host:rank: prefixes",
    "timeout_milabench_host.log": "one rank's timeout: explain names the other ranks as not in "
    "the paste (timeout_suspect) where the label says nccl_timeout",
    "watchdog_stuck_factory.log": "labelled watchdog_stuck; explain (like tests/data/explain/) "
    "calls the heartbeat monitor's report nccl_timeout, with the same recipe",
    "stacks_zero3_mixtral_odd.log": "rank 3 waits in a ZeRO reduce-scatter, the others in a "
    "ZeRO all-gather: the dump's analysis calls that mismatched collectives",
    # held out (measured once, at the end)
    "client_timeout_verl.log": "a TCPStore client timeout while connecting: labelled "
    "rendezvous-hang, mldebug nccl's reader says connection-refused",
}


def test_the_corpus_is_large_cited_labelled_and_holds_40_aside():
    files = sorted(p.name for p in CORPUS.glob("*.log"))
    assert sorted(case["file"] for case in CASES) == files
    assert len(CASES) >= 150
    assert sum(case["held_out"] for case in CASES) == 40
    assert sum(case["kind"] == HEALTHY for case in CASES) >= 20
    assert len({case["thread"].split("/")[4] for case in CASES}) >= 30  # projects
    for case in CASES:
        assert case["thread"].startswith("https://github.com/")
        assert case["cause"]
        assert case["kind"] == HEALTHY or case["recipe"] in RECIPES, case["file"]


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(c, marks=pytest.mark.xfail(reason=MISSES[c["file"]], strict=True))
        if c["file"] in MISSES
        else c
        for c in CASES
    ],
    ids=lambda case: case["file"],
)
def test_the_top_finding_is_the_threads_cause_and_healthy_pastes_stay_quiet(case):
    found = explain_text((CORPUS / case["file"]).read_bytes().decode(), case["file"])
    if case["kind"] == HEALTHY:
        loud = [(f.kind, f.recipe, f.summary) for f in found if f.severity != "info"]
        assert not loud
        return
    assert found
    top = found[0]
    assert (top.kind, top.recipe) == (case["kind"], case["recipe"])
    assert top.lines and all(where.startswith(case["file"] + ":") for where in top.lines)
    assert all(f.recipe in RECIPES for f in found if f.recipe)
