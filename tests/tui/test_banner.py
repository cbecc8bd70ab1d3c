"""The verdict banner shows each finding's sentence as the analysis wrote it, worst first."""

import io
from dataclasses import replace

from rich.console import Console
from testkit.tui_fakes import hung_job

from mldebug.model import SEVERITY_WARNING, Finding
from mldebug.tui.widgets.findings_banner import MAX_ROWS, banner_text

MEASURE = Console(file=io.StringIO(), color_system=None)


def test_each_finding_is_its_sentence_and_its_recipe():
    named = Finding(
        "missing", (0, 2, 3), "ranks 0,2-3 of 4 are not running", recipe="missing-ranks"
    )
    hang = Finding("hang", (0, 1), "all 2 ranks wait in all_reduce", severity=SEVERITY_WARNING)
    text = banner_text([named, hang], polled=True).plain.splitlines()
    assert text[0] == "✖ ranks 0,2-3 of 4 are not running  recipe: missing-ranks"
    assert text[1] == "▲ all 2 ranks wait in all_reduce  [r] read it"  # the top recipe's key


def test_the_verdict_of_the_real_analysis_names_its_ranks_and_line():
    # The analysis writes who and where into the sentence: the banner adds nothing to it.
    snapshot = hung_job(4, exited=(3,))
    lines = banner_text(snapshot.findings, polled=True).plain.splitlines()
    assert lines[0].startswith("✖ rank 3 of 4 is not running (rank 3 exited with code 1)")
    assert lines[1].startswith(
        "✖ rank 1 never reached all_reduce: it is busy in slow_data_loading (/job/train.py:31), "
        "while ranks 0,2 wait in all_reduce at train (/job/train.py:48)"
    )


LONG = Finding(
    "straggler",
    (1,),
    "rank 1 is the straggler: it arrives last at 92% of the all_reduce calls the others wait "
    "at; the others wait a median 30 ms a step for it (25% of their step time); its work "
    "between collectives takes 1.38x the median rank's; its main thread is mostly at "
    "/home/me/proj/train.py:65 (since step 16, 57 s ago)",
    severity=SEVERITY_WARNING,
    recipe="stragglers",
)
WORKING = Finding(
    "progressing",
    (0, 1, 2, 3),
    "all 4 ranks are working (their stacks move, they use CPU, or their agents see them "
    "move); nothing looks hung",
    recipe="stragglers",
)


def test_what_does_not_fit_the_banners_rows_is_counted_and_the_key_stays():
    # Both fit 160 columns; at 106 the second does not fit the 5 rows: it is counted.
    wide = banner_text([LONG, WORKING], polled=True, width=160).plain.splitlines()
    assert len(wide) == 2 and wide[1].endswith("[r] read it")
    narrow = banner_text([LONG, WORKING], polled=True, width=106)
    assert narrow.plain.splitlines()[-1] == "  ... and 1 more (Anomalies tab)  [r] read it"
    assert len(narrow.wrap(MEASURE, 106)) <= MAX_ROWS


def test_a_first_finding_longer_than_the_banner_is_cut_with_a_mark():
    # 30 columns: the straggler's sentence alone takes more than 5 rows
    rows = banner_text([LONG, WORKING], polled=True, width=30).plain.splitlines()
    assert len(rows) == MAX_ROWS and all(len(row) <= 30 for row in rows)
    assert rows[0].startswith("▲ rank 1 is the straggler")
    assert rows[-1].endswith("…  [r] read it")
    bare = replace(LONG, recipe=None)
    assert banner_text([bare], polled=True, width=30).plain.splitlines()[-1].endswith("…")
