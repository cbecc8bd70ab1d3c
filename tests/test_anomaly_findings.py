"""From the agents' `nonfinite` events to a finding (mldebug/collect/eventfiles.py,
mldebug/analysis/nonfinite.py): read bounded from the run directory, the origin told apart from
the ranks that only received the NaN, and shown by `dump` (text and --json).

The lines below are what the agent wrote for examples/nan_loss.py on 2 gloo ranks."""

from __future__ import annotations

import json
import os

from mldebug.analysis.nonfinite import nonfinite_findings
from mldebug.analysis.snapshot import build_snapshot
from mldebug.collect import eventfiles
from mldebug.collect.eventfiles import EventsReader, parse_event_line
from mldebug.model import KIND_NONFINITE, SEVERITY_ERROR, RankTarget
from mldebug.report.jsonout import snapshot_to_json
from mldebug.report.text import render_text

ORIGIN = {
    "time": 1796088155.749748,
    "rank": 1,
    "kind": "nonfinite",
    "step": 5,
    "message": "act (SquaredReLU) output became inf at step 5",
    "value": "inf",
    "trail": [["DistributedDataParallel (input)", 2.393e20], ["encoder", 1.068e20]],
    "location": "/job/nan_loss.py:40",
    "module": "act",
    "module_type": "SquaredReLU",
    "what": "output",
}
# Rank 0 got the NaN through DDP's averaged gradients, and wrote first.
RECEIVED = {
    "time": 1796088155.7498913 - 0.01,
    "rank": 0,
    "kind": "nonfinite",
    "step": 5,
    "message": "encoder (Linear) weight gradient became nan at step 5",
    "value": "nan",
    "trail": [["encoder (output gradient)", 0.043]],
    "module": "encoder",
    "module_type": "Linear",
    "what": "weight gradient",
    "param": "weight",
}
LATER = dict(RECEIVED, rank=2, step=6, what="output", module="head", time=RECEIVED["time"] + 9)


def event(data: dict):
    return parse_event_line(data["rank"], json.dumps(data))


def test_an_event_line_keeps_its_step_and_fields_as_text():
    parsed = event(ORIGIN)
    assert (parsed.rank, parsed.kind, parsed.step, parsed.location) == (
        1,
        "nonfinite",
        5,
        "/job/nan_loss.py:40",
    )
    fields = dict(parsed.fields)
    assert fields["module"] == "act" and fields["what"] == "output" and fields["value"] == "inf"
    assert fields["trail"] == "DistributedDataParallel (input) 2.393e+20, encoder 1.068e+20"
    # Hostile or odd values: escapes dropped, wrong types left out, sizes capped.
    odd = parse_event_line(
        3,
        json.dumps(
            {
                "kind": "nonfinite",
                "step": -1,
                "module": "\x1b[31mred",
                "x": {"a": 1},
                "n": "y" * 9999,
            }
        ),
    )
    assert odd.step is None and "\x1b" not in dict(odd.fields)["module"]
    assert "x" not in dict(odd.fields) and len(dict(odd.fields)["n"]) <= 400


def test_the_origin_is_the_rank_whose_own_step_went_bad_not_the_one_that_received_it():
    (finding,) = nonfinite_findings([event(RECEIVED), event(LATER), event(ORIGIN)])
    assert finding.kind == KIND_NONFINITE and finding.severity == SEVERITY_ERROR
    assert finding.ranks == (1,) and finding.recipe == "nonfinite-origin"
    assert finding.summary == (
        "NaN/Inf from rank 1 at step 5: act (SquaredReLU) output became inf, "
        "called at /job/nan_loss.py:40"
    )
    assert finding.location == "/job/nan_loss.py:40"
    assert "encoder 1.068e+20" in finding.detail
    assert "then rank 0 at step 5: encoder (Linear) weight gradient became nan" in finding.detail
    assert "then rank 2 at step 6: head (Linear) output became nan" in finding.detail


def test_an_earlier_step_wins_even_in_a_weight_gradient():
    early = dict(RECEIVED, step=3)
    (finding,) = nonfinite_findings([event(ORIGIN), event(early)])
    assert finding.ranks == (0,) and "step 3" in finding.summary


def test_no_nonfinite_event_no_finding():
    other = dict(ORIGIN, kind="memory_growth")
    assert nonfinite_findings([event(other)]) == []


def write_events(root, lines_by_rank: dict[int, list[str]]) -> None:
    for rank, lines in lines_by_rank.items():
        folder = root / "ranks" / str(rank)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "events.jsonl").write_text("".join(line + "\n" for line in lines))
    root.chmod(0o700)


def test_the_reader_reads_each_file_from_its_end_and_again_only_when_it_grew(tmp_path, monkeypatch):
    root = tmp_path / "run"
    write_events(root, {0: [json.dumps(RECEIVED)], 1: ["{broken", json.dumps(ORIGIN)]})
    reader = EventsReader()
    found, bad = reader.read(root)
    assert [e.rank for e in found] == [0, 1] and bad == 1
    reads = []
    real = eventfiles.read_event_file
    monkeypatch.setattr(eventfiles, "read_event_file", lambda *a: reads.append(a[0]) or real(*a))
    assert reader.read(root)[0] == found and reads == []
    with open(root / "ranks" / "0" / "events.jsonl", "a") as handle:
        handle.write(json.dumps(LATER) + "\n")
    assert len(reader.read(root)[0]) == 3 and reads == [0]


def test_the_reader_caps_what_it_reads_and_trusts_only_a_private_run(tmp_path):
    root = tmp_path / "run"
    filler = json.dumps({"kind": "x", "message": "m" * 200})
    write_events(root, {0: [filler] * 2000 + [json.dumps(ORIGIN)]})
    found, _ = EventsReader().read(root)
    assert found[-1].kind == "nonfinite" and len(found) < 400  # the last 64 KiB only
    os.chmod(root, 0o777)
    assert EventsReader().read(root) == ((), 0)
    assert EventsReader().read(None) == ((), 0)


def test_dump_shows_the_origin_in_text_and_json():
    targets = [RankTarget(pid=10 + r, rank=r, world_size=2) for r in (0, 1)]
    snap = build_snapshot(targets, {}, 2, events=[event(RECEIVED), event(ORIGIN)])
    (finding,) = [f for f in snap.findings if f.kind == KIND_NONFINITE]
    assert snap.findings[0] == finding  # an error before what the stacks say
    data = snapshot_to_json(snap)
    (as_json,) = [f for f in data["findings"] if f["kind"] == "nonfinite"]
    assert as_json["ranks"] == [1] and as_json["location"] == "/job/nan_loss.py:40"
    assert as_json["recipe"] == "nonfinite-origin"
    text = render_text(snap)
    assert "Verdict: NaN/Inf from rank 1 at step 5: act (SquaredReLU) output became inf" in text


def test_the_anomalies_tab_lists_the_origin_first():
    """attach draws the same findings (its poller goes through mldebug.observe.pyspy)."""
    import asyncio

    from textual.widgets import DataTable

    from mldebug.commands.attach import live_app

    targets = [RankTarget(pid=10 + r, rank=r, world_size=2) for r in (0, 1)]
    snap = build_snapshot(targets, {}, 2, events=[event(RECEIVED), event(ORIGIN)])

    class Poller:
        def poll(self):
            return snap

        def read_native(self, rank):
            return None

    async def look() -> list[str]:
        app = live_app(Poller(), interval=3600)
        async with app.run_test(size=(160, 40)) as pilot:
            await app.workers.wait_for_complete()
            await pilot.pause()
            table = app.query_one("#findings-table", DataTable)
            return [str(cell) for cell in table.get_row_at(0)]

    row = asyncio.run(look())
    assert row[:3] == ["error", "nonfinite", "1"]
    assert row[3].startswith("NaN/Inf from rank 1 at step 5: act (SquaredReLU) output became inf")
    assert row[4:] == ["/job/nan_loss.py:40", "nonfinite-origin"]


def test_the_reader_keeps_the_newest_500_events_of_a_rank(tmp_path):
    root = tmp_path / "run"
    short = [json.dumps({"kind": "nonfinite", "step": i, "message": "m"}) for i in range(501)]
    write_events(root, {0: short})  # 501 short lines: within the bytes read
    found, bad = EventsReader().read(root)
    assert bad == 0 and [e.step for e in found] == list(range(1, 501))
