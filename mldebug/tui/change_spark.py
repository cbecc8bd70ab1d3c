"""The Timing tab's mark of a change over time: a rank's whole-run step times (its agent's
history blocks) as a sparkline whose bars from the change on stand out, for the ranks a
`slowdown` finding (analysis/change.py) is about."""

from __future__ import annotations

from rich.text import Text

from mldebug.model import Finding, JobSnapshot
from mldebug.report.timing import sparkline

KIND = "slowdown"
WIDTH = 24


def slowdown_of(findings: tuple[Finding, ...]) -> tuple[Finding, int] | None:
    """The slowdown finding and the step (or collective) it began at."""
    for finding in findings:
        if finding.kind != KIND:
            continue
        since = dict(finding.facts).get("since", "")
        digits = "".join(ch for ch in since if ch.isdigit())
        if digits:
            return finding, int(digits)
    return None


def _buckets(values: list[float], firsts: list[int], width: int) -> tuple[list[float], list[int]]:
    """At most `width` bars: neighbouring blocks averaged, each bar with its first unit."""
    if len(values) <= width:
        return values, firsts
    size = len(values) / width
    bars, starts = [], []
    for i in range(width):
        lo, hi = int(i * size), max(int(i * size) + 1, int((i + 1) * size))
        chunk = values[lo:hi]
        bars.append(sum(chunk) / len(chunk))
        starts.append(firsts[lo])
    return bars, starts


def change_cells(snapshot: JobSnapshot) -> dict[int, tuple[Text, Text]]:
    """rank -> (its whole-run sparkline with the change marked, its mark), for the ranks
    the slowdown finding names or says wait; empty without one."""
    found = slowdown_of(snapshot.findings)
    if found is None:
        return {}
    finding, since = found
    cells = {}
    for view in snapshot.ranks:
        if view.rank not in finding.ranks and view.rank not in finding.waiting:
            continue
        timing = view.agent.timing if view.agent is not None else None
        if timing is None or not timing.history:
            continue
        bars, starts = _buckets(
            [b.wall for b in timing.history], [b.first for b in timing.history], WIDTH
        )
        line = sparkline(bars, width=WIDTH)
        cut = next((i for i, first in enumerate(starts) if first >= since), len(line))
        spark = Text()
        spark.append(line[:cut], style="dim")
        spark.append(line[cut:], style="bold yellow")
        own = view.rank in finding.ranks
        mark = Text(f"◀ slower from ~{since}" if own else "◀ waits for it", style="yellow")
        cells[view.rank] = (spark, mark)
    return cells
