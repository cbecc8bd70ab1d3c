"""The verdict banner shows each finding's sentence as the analysis wrote it, worst first."""

from testkit.tui_fakes import hung_job

from mldebug.model import SEVERITY_WARNING, Finding
from mldebug.tui.widgets.findings_banner import banner_text


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
