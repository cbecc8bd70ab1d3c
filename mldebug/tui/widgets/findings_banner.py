"""The verdict on top: the findings of the latest snapshot, with their recipe.

Findings come worst first from analysis (find_problems), as the text report and the JSON
verdict show them; the banner keeps that order. Each finding's summary already names its
ranks and where they are (the analysis writes it so), so the banner shows it as it is.

The banner is at most MAX_ROWS rows high (app.tcss). Wrapped to its width, it shows as many
findings as fit whole, counts the others ("and N more"), and keeps the "[r] read it" hint;
a first finding longer than the banner is cut at its last row with "…".
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Sequence
from typing import Any

from rich.console import Console
from rich.text import Text
from textual.widgets import Static

from mldebug.model import SEVERITY_ERROR, SEVERITY_INFO, SEVERITY_WARNING, Finding
from mldebug.textsafe import one_line, printable
from mldebug.wording import SEVERITY_MARKS, finding_text

MARK_STYLES = {SEVERITY_ERROR: "bold red", SEVERITY_WARNING: "bold yellow", SEVERITY_INFO: "green"}
MAX_SHOWN = 3  # the banner stays small; the rest is counted
MAX_ROWS = 5  # #banner's max-height in app.tcss
READ_IT = "  [r] read it"
_MEASURE = Console(file=io.StringIO(), width=80, color_system=None)  # wraps, never prints


def banner_text(findings: Sequence[Finding], polled: bool, width: int | None = None) -> Text:
    """The banner's text; with `width` (its content's), what fits MAX_ROWS rows of it."""
    text = Text()
    if not polled:
        text.append("Reading the job's stacks...", style="dim")
        return text
    if not findings:
        text.append("● ", style="green")
        text.append("No problem found in this snapshot.")
        return text
    shown = list(findings)
    if width is None:
        return _findings_text(shown, min(MAX_SHOWN, len(shown)))
    for count in range(min(MAX_SHOWN, len(shown)), 0, -1):
        text = _findings_text(shown, count)
        if len(_wrapped(text, width)) <= MAX_ROWS:
            return text
    return _cut(text, width, bool(shown[0].recipe))


def _findings_text(shown: Sequence[Finding], count: int) -> Text:
    """The first `count` findings, the others counted, the top recipe's key."""
    text = Text()
    for index, finding in enumerate(shown[:count]):
        if index:
            text.append("\n")
        mark = SEVERITY_MARKS.get(finding.severity, SEVERITY_MARKS[SEVERITY_INFO])
        text.append(f"{mark} ", style=MARK_STYLES.get(finding.severity, ""))
        text.append(printable(finding_text(finding)), style="bold" if index == 0 else "")
        if finding.recipe:
            text.append(f"  recipe: {one_line(finding.recipe)}", style="italic")
    if len(shown) > count:
        text.append(f"\n  ... and {len(shown) - count} more (Anomalies tab)", style="dim")
    if shown[0].recipe:
        text.append(READ_IT, style="dim")
    return text


def _wrapped(text: Text, width: int) -> list[Text]:
    return list(text.wrap(_MEASURE, max(width, 1)))


def _cut(text: Text, width: int, recipe: bool) -> Text:
    """A finding longer than the banner: its first MAX_ROWS rows, the last ending with "…"
    (and the recipe's key, where it has one)."""
    rows = _wrapped(text, width)[:MAX_ROWS]
    last = rows[-1]
    last.rstrip()
    tail = READ_IT if recipe else ""
    last.truncate(max(width - 1 - len(tail), 0))
    last.append("…")
    if tail:
        last.append(tail, style="dim")
    return Text("\n").join(rows)


class FindingsBanner(Static):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(banner_text((), polled=False), **kwargs)
        self.findings: tuple[Finding, ...] = ()

    def show(self, findings: Iterable[Finding]) -> None:
        findings = tuple(findings)
        severity = findings[0].severity if findings else SEVERITY_INFO
        self.set_class(severity == SEVERITY_ERROR, "-error")
        self.set_class(severity == SEVERITY_WARNING, "-warning")
        if findings == self.findings and self.has_class("-polled"):
            return
        self.add_class("-polled")
        self.findings = findings
        self._draw()

    def on_resize(self) -> None:
        if self.has_class("-polled"):
            self._draw()

    def _draw(self) -> None:
        width = self.size.width or None  # not laid out yet: the whole text
        self.update(banner_text(self.findings, polled=True, width=width))

    @property
    def top_recipe(self) -> str | None:
        for finding in self.findings:
            if finding.recipe:
                return finding.recipe
        return None
