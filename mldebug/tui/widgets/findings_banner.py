"""The verdict on top: the findings of the latest snapshot, with their recipe.

Findings come worst first from analysis (find_problems), as the text report and the JSON
verdict show them; the banner keeps that order. Each finding's summary already names its
ranks and where they are (the analysis writes it so), so the banner shows it as it is.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from rich.text import Text
from textual.widgets import Static

from mldebug.model import SEVERITY_ERROR, SEVERITY_INFO, SEVERITY_WARNING, Finding
from mldebug.textsafe import one_line, printable
from mldebug.wording import SEVERITY_MARKS, finding_text

MARK_STYLES = {SEVERITY_ERROR: "bold red", SEVERITY_WARNING: "bold yellow", SEVERITY_INFO: "green"}
MAX_SHOWN = 3  # the banner stays small; the rest is counted


def banner_text(findings: Sequence[Finding], polled: bool) -> Text:
    text = Text()
    if not polled:
        text.append("Reading the job's stacks...", style="dim")
        return text
    if not findings:
        text.append("● ", style="green")
        text.append("No problem found in this snapshot.")
        return text
    shown = list(findings)
    for index, finding in enumerate(shown[:MAX_SHOWN]):
        if index:
            text.append("\n")
        mark = SEVERITY_MARKS.get(finding.severity, SEVERITY_MARKS[SEVERITY_INFO])
        text.append(f"{mark} ", style=MARK_STYLES.get(finding.severity, ""))
        text.append(printable(finding_text(finding)), style="bold" if index == 0 else "")
        if finding.recipe:
            text.append(f"  recipe: {one_line(finding.recipe)}", style="italic")
    if len(shown) > MAX_SHOWN:
        text.append(f"\n  ... and {len(shown) - MAX_SHOWN} more (Anomalies tab)", style="dim")
    if shown[0].recipe:
        text.append("  [r] read it", style="dim")
    return text


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
        self.update(banner_text(findings, polled=True))

    @property
    def top_recipe(self) -> str | None:
        for finding in self.findings:
            if finding.recipe:
                return finding.recipe
        return None
