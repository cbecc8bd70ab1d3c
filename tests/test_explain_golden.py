"""`mldebug explain` on the corpus of pasted fragments (tests/data/explain/index.json): each
log was written for mldebug in the format of a public issue thread (own host names,
addresses and paths) and its top finding must be the cause that thread established.

And on recorded input nobody here wrote: the H200's NCCL logs (tests/data/gpu/) and the
real gloo jobs of tests/data/nccl/gloo/.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mldebug.explain.engine import explain, explain_text
from mldebug.recipes import load_recipes

DATA = Path(__file__).resolve().parent / "data"
CORPUS = DATA / "explain"
CASES = json.loads((CORPUS / "index.json").read_text())["cases"]
RECIPES = {recipe.id for recipe in load_recipes()}


def test_the_corpus_is_indexed_whole_and_large_enough():
    files = sorted(p.name for p in CORPUS.glob("*.log"))
    assert sorted(case["file"] for case in CASES) == files
    assert len(CASES) >= 60
    assert all(case["thread"].startswith("https://github.com/") for case in CASES)
    assert all(case["cause"] and case["recipe"] in RECIPES for case in CASES)


@pytest.mark.parametrize("case", CASES, ids=lambda case: case["file"])
def test_the_top_finding_is_the_cause_the_thread_established(case):
    found = explain_text((CORPUS / case["file"]).read_bytes().decode(), case["file"])
    assert found, case["file"]
    top = found[0]
    assert (top.kind, list(top.ranks), top.recipe) == (case["kind"], case["ranks"], case["recipe"])
    # It rests on lines of the log, names a shipped recipe, and says what to do.
    assert top.lines and all(where.startswith(case["file"] + ":") for where in top.lines)
    assert all(f.recipe in RECIPES for f in found if f.recipe)
    assert top.summary and 0 < top.confidence <= 1


def test_the_fragment_says_what_it_cannot_tell():
    found = explain_text((CORPUS / "timeout_rank0_tokenizing.log").read_bytes().decode())
    top = found[0]
    assert "ranks 1-3 of at least 4 timed out in ALLREDUCE SeqNum 2" in top.summary
    assert "rank 0 is not in the paste: if it printed nothing, it never reached" in top.summary
    assert "progress bar" in top.summary
    assert "world size is not in the paste" in top.note


def test_a_healthy_recorded_nccl_job_gets_no_error():
    # GIVEN the NCCL INFO log and Flight Recorder dump of a job whose collectives all
    # completed (recorded on an H200; its stderr holds the recorder script's own TypeError)
    ok = DATA / "gpu" / "nccl_ok"
    report = explain([str(ok / "nccl.vm.501.log"), str(ok / "fr_dump.pickle")])
    # THEN nothing is called an error
    assert report.readable
    assert not report.errors, [f.summary for f in report.findings]


@pytest.mark.parametrize(
    ("folder", "kind", "ranks"),
    [
        # rank 2 never reaches monitored_barrier: rank 0 names it
        ("barrier", "dist_error", (2,)),
        # rank 2 skips an all_reduce: ranks 0-1 time out, rank 2 did not
        ("recv_timeout", "dist_error", (2,)),
        # rank 1 exits: ranks 0 and 2 lose the connection
        ("peer_closed", "connection", (0, 2)),
    ],
)
def test_recorded_gloo_jobs_name_the_rank(folder, kind, ranks):
    report = explain([str(DATA / "nccl" / "gloo" / folder)])
    top = report.findings[0]
    assert (top.kind, top.ranks) == (kind, ranks), [
        (f.kind, f.ranks, f.summary) for f in report.findings
    ]


def test_the_recorded_duplicate_gpu_names_its_recipe():
    report = explain([str(DATA / "gpu" / "nccl_duplicate_gpu")])
    top = report.findings[0]
    assert top.kind == "duplicate_gpu" and top.recipe == "duplicate-gpu"
    assert top.ranks == (0, 1)


def test_the_corpus_read_as_files_gives_the_same_top_findings():
    # As `mldebug explain FILE` reads them: a file whose name says "rank0" gives that rank to
    # the lines no prefix names, and torch's own "[Rank N]" still wins.
    for case in CASES:
        top = explain([str(CORPUS / case["file"])]).findings[0]
        assert (top.kind, list(top.ranks), top.recipe) == (
            case["kind"],
            case["ranks"],
            case["recipe"],
        ), case["file"]
