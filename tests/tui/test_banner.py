"""The verdict banner: what it adds to each finding's sentence, and what it leaves out."""

from mldebug.model import SEVERITY_WARNING, Finding
from mldebug.tui.widgets.findings_banner import banner_text


def test_ranks_are_added_only_when_the_sentence_does_not_name_them():
    named = Finding("missing", (0, 2, 3), "ranks 0,2-3 of 4 are not running")
    unnamed = Finding("hang", (0, 1), "all 2 ranks wait in all_reduce", severity=SEVERITY_WARNING)
    text = banner_text([named, unnamed], polled=True).plain.splitlines()
    assert text[0] == "✖ ranks 0,2-3 of 4 are not running"
    assert text[1] == "▲ all 2 ranks wait in all_reduce  ranks 0-1"
