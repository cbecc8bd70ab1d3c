"""The hang watchdog's report of a look (`mldebug run --hang-timeout`): the verdict line it
prints on the console, and the text and JSON it writes under <run>/reports/. The launcher
is handed `hang_report` by the command that starts it (commands/run.py): it never renders."""

from __future__ import annotations

from collections.abc import Sequence

from mldebug.model import JobSnapshot
from mldebug.report.jsonout import snapshot_to_json
from mldebug.report.text import render_text
from mldebug.textsafe import printable
from mldebug.wording import finding_text


def verdict_line(snapshot: JobSnapshot) -> str:
    """The verdict in one line, with the culprit's place when its sentence has none."""
    if not snapshot.findings:
        return "nothing found (every rank was read; see the report)"
    first = snapshot.findings[0]
    said = finding_text(first)
    where = f" ({first.location})" if first.location and first.location not in said else ""
    return printable(said + where)


def hang_report(snapshot: JobSnapshot, notes: Sequence[str] = ()) -> tuple[str, str, dict]:
    """(verdict line, report text with every rank's threads, report JSON), as `dump` says
    them."""
    body = render_text(snapshot, verbose=True)
    if notes:
        body = "".join(f"{printable(note)}\n" for note in notes) + body
    return verdict_line(snapshot), body, snapshot_to_json(snapshot)
