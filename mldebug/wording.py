"""How mldebug words the things every view and verdict names: rank sets, byte sizes and
severities (byte sizes are rankrules.human_bytes, which the agent shares). One place, so a finding, the text report, the TUI and `mldebug nccl` say
them alike. Standard library and the model only: the analysis and every view import it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from mldebug.model import SEVERITY_ERROR, SEVERITY_INFO, SEVERITY_WARNING, Finding
from mldebug.ranges import format_sorted
from mldebug.rankrules import human_bytes

__all__ = ["finding_text", "human_bytes", "ranks_text", "severity_mark", "verb"]

# The mark a finding's severity is shown with, in the text report, the TUI and `nccl`.
SEVERITY_MARKS = {SEVERITY_ERROR: "✖", SEVERITY_WARNING: "▲", SEVERITY_INFO: "●"}
NO_MARK = "•"  # a severity mldebug does not know


def ranks_text(ranks: Iterable[int]) -> str:
    """ "rank 3" or "ranks 0-2,5": the ranks sorted, as compact ranges."""
    ordered = sorted(set(ranks))
    return f"rank {ordered[0]}" if len(ordered) == 1 else f"ranks {format_sorted(ordered)}"


def verb(ranks: Sequence[int], one: str, many: str) -> str:
    """The verb's form for that many ranks: verb(ranks, "waits", "wait")."""
    return one if len(ranks) == 1 else many


def severity_mark(severity: str) -> str:
    return SEVERITY_MARKS.get(severity, NO_MARK)


def finding_text(finding: Finding) -> str:
    """A finding's sentence as people read it: its summary and what later steps added, then
    what the judge said of how long the wait has lasted. For the views only: code reads a
    finding's fields."""
    said = finding.summary + finding.then
    return f"{said} ({finding.since})" if finding.since else said
