"""The text report and the JSON contract, from snapshots built by hand."""

import json

from testkit.stacks import at, in_op, snapshot, still

from mldebug.report.jsonout import snapshot_to_json
from mldebug.report.text import render_text


def straggler():
    ranks = {r: still(in_op("all_reduce", "sync", 64)) for r in range(1024)}
    ranks[513] = still(at("load_shard", 38))
    return snapshot(ranks, world=1024)


def test_text_puts_the_verdict_first_and_ranges_on_the_tree():
    text = render_text(straggler(), width=160)
    lines = text.splitlines()
    assert lines[0].startswith("mldebug dump: 1024 ranks found of world size 1024")
    assert lines[1].startswith("Verdict: rank 513 never reached all_reduce")
    assert "what to do: mldebug recipes rank-outside-collective" in text
    assert text.index("Verdict") < text.index("Ranks by stack") < text.index("Merged stacks")
    assert "sync (/home/me/proj/train.py:64)  [0-512,514-1023]" in text
    assert "load_shard (/home/me/proj/train.py:38)  [513]" in text
    assert "\x1b[" not in text
    assert "rank 513  pid" not in text  # per-rank detail only on request


def test_text_detail_on_request_and_colour_when_asked():
    text = render_text(straggler(), ranks=[513], color=True)
    assert "\x1b[" in text
    plain = render_text(straggler(), ranks=[513])
    assert "rank 513  pid 1513" in plain
    assert "load_shard (/home/me/proj/train.py:38)" in plain.split("rank 513  pid")[1]


def test_json_contract():
    data = json.loads(json.dumps(snapshot_to_json(straggler())))
    assert {"ranks", "groups", "findings"} <= set(data)
    (finding,) = data["findings"]
    assert {"kind", "ranks", "summary", "location", "recipe"} <= set(finding)
    assert finding["ranks"] == [513] and all(isinstance(r, int) for r in finding["ranks"])
    assert finding["location"] == "/home/me/proj/train.py:38"
    assert data["groups"][0]["ranks_text"] == "0-512,514-1023"
    assert data["ranks"][513]["state"] == "stuck"
    assert data["ranks"][0]["threads"][0]["frames"][0]["function"] == "<module>"
    assert data["verdict"] == finding["summary"]


def test_a_working_job_is_not_told_what_to_do():
    # Its recipe (stragglers) is offered for when it is too slow, not as a fix.
    moving = (at("forward", 30), at("forward", 31), at("forward", 30))
    text = render_text(snapshot({0: (moving, {}), 1: (moving, {})}, world=2), width=160)
    assert "if it is too slow: mldebug recipes stragglers" in text
    assert "what to do" not in text
