"""Text from ranks and files is data: markup and control sequences in it are shown, or dropped,
never obeyed. A job whose every string carries hostile text is built through the real analysis
(build_snapshot, read_crashes) and rendered by the text report and the JSON report.

The TUI gets the same job in tests/tui/test_hostile_text_tui.py.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

from hypothesis import HealthCheck, assume, given, settings
from rich.console import Console
from testkit.hostile import (
    HOSTILE,
    assert_no_control,
    hostile_job,
    hostile_text,
    user_file,
)

from mldebug.analysis.frames import is_library_file
from mldebug.model import (
    KIND_CRASH,
    KIND_OUTLIER,
    KIND_UNREADABLE,
    JobSnapshot,
)
from mldebug.report.jsonout import snapshot_to_json
from mldebug.report.text import print_report, render_text
from mldebug.textsafe import one_line, printable


def report_outputs(snapshot: JobSnapshot) -> tuple[str, str]:
    """The text report with every rank's detail, as `dump -v` prints it to a terminal
    (colours on), and the JSON report as `dump --json` writes it."""
    buffer = io.StringIO()
    console = Console(file=buffer, width=4000, force_terminal=True, color_system="standard")
    print_report(snapshot, console, verbose=True)
    return buffer.getvalue(), json.dumps(snapshot_to_json(snapshot), indent=1)


PLACEHOLDER = "PLAIN"


def normalized(report: str) -> list[str]:
    """The report's lines without the padding that column widths add."""
    return [re.sub(" +", " ", line).rstrip() for line in report.splitlines()]


def check_report(text: str, visible: str, tmp_path: Path) -> None:
    snapshot = hostile_job(text, tmp_path / "hostile")
    kinds = [f.kind for f in snapshot.findings]
    assert kinds[0] == KIND_CRASH and {KIND_OUTLIER, KIND_UNREADABLE} <= set(kinds)

    coloured, raw_json = report_outputs(snapshot)
    plain = render_text(snapshot, verbose=True, width=4000)
    # What the terminal gets has the project's own colours, and nothing from the data.
    assert "\x1b[" in coloured
    for escape in ("\x1b[2J", "\x1b]", "\x1b[H", "\x9b", "\x07", "\x00"):
        assert escape not in coloured, repr(escape)
    assert_no_control(plain)
    assert f"Verdict: rank 2 failed first: {visible}Error: no shard at {visible}" in plain
    # Everywhere the data is shown, it reads as written: the report is the one of the same
    # job with plain words in it, the words replaced by what a person must see.
    benign = render_text(hostile_job(PLACEHOLDER, tmp_path / "benign"), verbose=True, width=4000)
    expected = [line.replace(PLACEHOLDER, visible) for line in normalized(benign)]
    assert normalized(plain) == expected
    # The JSON keeps the data as the ranks gave it, every control character escaped.
    assert_no_control(raw_json)
    data = json.loads(raw_json)
    assert data["ranks"][0]["host"] == f"node {text}"
    assert data["ranks"][0]["threads"][0]["name"] == f"main {text}"
    assert data["findings"][0]["summary"].startswith(f"rank 2 failed first: {text}Error")


def test_named_hostile_strings_are_shown_as_written_in_the_text_and_json_reports(tmp_path):
    failures = []
    for name, (text, visible) in HOSTILE.items():
        run = tmp_path / name.replace(" ", "-")
        try:
            check_report(text, visible, run)
        except Exception as error:  # collect them all: one report names every case
            failures.append(f"{name}: {type(error).__name__}: {error}")
    assert not failures, "\n".join(failures)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(hostile_text())
def test_any_mix_of_markup_and_control_sequences_is_shown_as_plain_text(tmp_path, case):
    text, visible = case
    assume(not is_library_file(user_file(text)))
    check_report(text, visible, tmp_path)


def test_printable_drops_control_sequences_whole_and_keeps_lines():
    for text, visible in HOSTILE.values():
        assert printable(text) == visible
    assert printable("Traceback:\n\tline 1\r\n") == "Traceback:\n\tline 1\n"
    assert one_line("two\nlines\tand a tab") == "two lines and a tab"
    assert printable("an unterminated \x1b]0;title\nnext line") == "an unterminated \nnext line"
    assert printable("plain [text]") == "plain [text]"
