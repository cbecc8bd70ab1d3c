"""`mldebug explain`'s report: findings most sure first, each with the lines it rests on,
the ranks it names, what a fragment cannot tell, the fix and the recipe. JSON for scripts
(each finding as dump --json's, plus `confidence`, `evidence`, `fix`, `note`).

Everything shown comes from files or a paste: through `textsafe` before a terminal.
"""

from __future__ import annotations

import textwrap

from mldebug.explain.finding import Explained, Explanation, sure_word
from mldebug.ranges import format_ranks
from mldebug.report.facts import fact_lines, recipe_command
from mldebug.report.jsonout import finding_to_json
from mldebug.textsafe import one_line
from mldebug.wording import ranks_text, severity_mark

SCHEMA_VERSION = 1
SHOWN = 5  # findings in the text report unless --all
QUOTE = 110  # characters of the first cited line quoted
LOUD = (
    "rror",
    "Watchdog",
    "WARN",
    "failed",
    "Failed",
    "imed out",
    "Detected",
    "Expected",
    "Unable",
)


def _quote(finding: Explained, report: Explanation) -> str | None:
    cited = set(finding.lines)
    lines = [line for line in report.lines if line.where in cited]
    # The first message it rests on that says what went wrong (not a progress bar or an
    # INFO line beside it), else the first.
    said = [line for line in lines if not line.progress]
    line = next(
        (line for line in said if any(word in line.text for word in LOUD)),
        said[0] if said else (lines[0] if lines else None),
    )
    if line is None:
        return None
    text = one_line(line.text).strip()
    return text if len(text) <= QUOTE else text[: QUOTE - 1] + "…"


def finding_lines(number: int, finding: Explained, report: Explanation) -> list[str]:
    mark = severity_mark(finding.severity)
    out = [f"{number}. {mark} {one_line(finding.summary + finding.then)}"]
    facts = [f"sure: {sure_word(finding.confidence)} ({finding.confidence:.2f})"]
    if finding.ranks:
        facts.append(f"names {ranks_text(finding.ranks)}")
    if finding.location:
        facts.append(f"at {one_line(finding.location)}")
    out.append("   " + "   ".join(facts))
    if finding.lines:
        shown = ", ".join(one_line(w) for w in finding.lines[:4])
        more = len(finding.lines) - 4
        out.append(f"   lines: {shown}" + (f" and {more} more" if more > 0 else ""))
        quote = _quote(finding, report)
        if quote:
            out.append(f"     | {quote}")
    told = [
        ("from a fragment: ", finding.note),
        ("", one_line(finding.detail)[:300]),
        ("fix: ", finding.fix),
        ("recipe: ", recipe_command(finding.recipe)),
    ]
    return out + fact_lines("   ", told)


def _head(report: Explanation) -> str:
    names = [s.name for s in report.sources]
    size = sum(s.bytes_read for s in report.sources)
    count = sum(s.lines for s in report.sources)
    what = (
        "a paste"
        if names == ["<stdin>"]
        else f"{len(names)} {'file' if len(names) == 1 else 'files'}"
    )
    amount = f"{size / 1e6:,.0f} MB" if size >= 10e6 else f"{size / 1024:.1f} KB"
    parts = [f"{what} ({count:,} lines, {amount})"] if names else []
    if report.traces:
        n, events = len(report.traces), sum(t.events for t in report.traces)
        parts.append(
            f"{n} profiler {'trace' if n == 1 else 'traces'} "
            f"({events:,} events, {report.trace_bytes / 1024:.1f} KB)"
        )
    if report.scan.dumps:
        parts.append(f"{len(report.scan.dumps)} Flight Recorder dumps")
    if report.scan.ras:
        ras = len(report.scan.ras)
        parts.append(f"{ras} NCCL RAS {'report' if ras == 1 else 'reports'}")
    head = "mldebug explain: " + (", ".join(parts) or f"{what} (0 lines)")

    if report.ranks:
        head += f"; ranks seen: {format_ranks(report.ranks)}"
    return head


def _wrap(lines: list[str], width: int | None) -> list[str]:
    """Each line wrapped to `width` under its own indent (a terminal); as is in a pipe."""
    if not width:
        return lines
    out = []
    for line in lines:
        body = line.lstrip(" ")
        indent = " " * (len(line) - len(body))
        if body.startswith("| "):  # a quoted log line: cut, never wrapped
            out.append(line[:width])
            continue
        hang = indent + ("   " if body[:1].isdigit() else "  ")
        out.extend(
            textwrap.wrap(
                body, width, initial_indent=indent, subsequent_indent=hang, break_on_hyphens=False
            )
            or [""]
        )
    return out


def text_report(report: Explanation, show_all: bool = False, width: int | None = None) -> str:
    out = [_head(report)]
    for problem in report.problems[:10]:
        out.append(f"  not read: {one_line(problem)}")
    out.append("")
    if not report.findings:
        out.append(
            "Nothing wrong found: no error, timeout, OOM or NCCL/torch/gloo message that "
            "mldebug knows. `mldebug recipes --search -` ranks the guides by the words of the "
            "text."
        )
        return "\n".join(out) + "\n"
    shown = report.findings if show_all else report.findings[:SHOWN]
    for number, finding in enumerate(shown, 1):
        out.extend(_wrap(finding_lines(number, finding, report), width))
        out.append("")
    hidden = len(report.findings) - len(shown)
    if hidden > 0:
        out.append(f"... {hidden} more, less sure (--all shows them)")
    return "\n".join(out).rstrip() + "\n"


def finding_json(finding: Explained) -> dict:
    data = finding_to_json(finding.as_finding())
    data.update(
        summary=finding.summary + finding.then,
        confidence=round(finding.confidence, 2),
        evidence=list(finding.lines),
        fix=finding.fix,
        note=finding.note,
    )
    return data


def json_report(report: Explanation) -> dict:
    return {
        "version": SCHEMA_VERSION,
        "sources": [
            {"path": s.name, "lines": s.lines, "bytes_read": s.bytes_read, "truncated": s.truncated}
            for s in report.sources
        ],
        "flight_dumps": [{"path": d.path, "rank": d.rank} for d in report.scan.dumps],
        "traces": [
            {"path": t.source, "rank": t.rank, "events": t.events, "truncated": t.cut}
            for t in report.traces
        ],
        "problems": list(report.problems),
        "ranks_seen": sorted(report.ranks),
        "verdict": report.findings[0].summary + report.findings[0].then
        if report.findings
        else None,
        "findings": [finding_json(f) for f in report.findings],
    }
