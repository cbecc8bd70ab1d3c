"""`mldebug nccl`'s report: text for people, JSON for scripts (same `findings` as dump's).

Everything shown comes from files: passed through `textsafe` before it reaches a terminal.
"""

from __future__ import annotations

from mldebug import flight
from mldebug.model import SEVERITY_ERROR, Finding
from mldebug.nccl import ranklog
from mldebug.nccl.scan import Scan
from mldebug.ranges import format_ranks
from mldebug.report.facts import fact_lines, recipe_command
from mldebug.report.jsonout import finding_to_json
from mldebug.textsafe import one_line
from mldebug.wording import finding_text, human_bytes, severity_mark

SCHEMA_VERSION = 1
RANKS_SHOWN = 8  # rank summaries in the text report unless --verbose


def finding_lines(finding: Finding) -> list[str]:
    mark = severity_mark(finding.severity)
    facts = [
        ("at ", finding.location),
        ("", one_line(finding.detail)[:600]),
        ("what to do: ", recipe_command(finding.recipe)),
    ]
    return [f"{mark} {one_line(finding_text(finding))}", *fact_lines("    ", facts)]


def _shown(scan: Scan, verbose: bool) -> list[ranklog.RankLog]:
    logs = [log for log in scan.ranks if log.said_anything]
    if verbose or len(logs) <= RANKS_SHOWN:
        return logs
    named = {r for f in scan.findings if f.severity == SEVERITY_ERROR for r in f.ranks}
    first = [log for log in logs if log.rank in named][:RANKS_SHOWN]
    rest = [log for log in logs if log not in first]
    return first + rest[: RANKS_SHOWN - len(first)]


def text_report(scan: Scan, verbose: bool = False) -> str:
    logs = [log for log in scan.logs if log.error is None]
    size = sum(log.bytes_read for log in logs)
    ranks = [log for log in scan.ranks if log.said_anything]
    known = [log.rank for log in ranks if log.rank is not None]
    read = []
    if logs or not (scan.dumps or scan.ras):
        read.append(
            f"{len(logs)} log {'file' if len(logs) == 1 else 'files'} ({human_bytes(size)})"
        )
    if scan.dumps:
        read.append(f"{len(scan.dumps)} Flight Recorder dump{'s' if len(scan.dumps) > 1 else ''}")
    if scan.ras:  # saved `ncclras` answers (ras/read.py)
        read.append(f"{len(scan.ras)} NCCL RAS answer{'s' if len(scan.ras) > 1 else ''}")
    head = "mldebug nccl: " + ", ".join(read)
    if logs:
        head += f"; {len(ranks)} {'rank' if len(ranks) == 1 else 'ranks'} or processes"
        head += f" (ranks {format_ranks(known)})" if known else ""
    out = [head]
    for problem in scan.problems[:20]:
        out.append(f"  not read: {one_line(problem)}")
    if len(scan.problems) > 20:
        out.append(f"  ... and {len(scan.problems) - 20} more not read")
    cut = [log for log in logs if log.truncated]
    if cut:
        out.append(f"  {len(cut)} files read in part only (their size is capped)")
    if not scan.recognised:
        out.append(
            "No NCCL debug lines, torch.distributed errors or Flight Recorder dumps found. "
            "Run with NCCL_DEBUG=INFO (mldebug run --nccl-debug INFO) to get NCCL's log."
        )
        return "\n".join(out) + "\n"
    out.append("")
    if scan.findings:
        out.append("Findings")
        for finding in scan.findings:
            out.extend("  " + line for line in finding_lines(finding))
    else:
        out.append("Nothing wrong found across the ranks.")
    shown = _shown(scan, verbose)
    if shown:
        out.append("")
        out.append("Ranks")
        for log in shown:
            out.extend("  " + one_line(line) for line in ranklog.summary_lines(log))
        hidden = len(ranks) - len(shown)
        if hidden > 0:
            out.append(f"  ... {hidden} more (--verbose shows every rank)")
    if scan.dumps:
        out.append("")
        out.append("Flight Recorder")
        for dump in sorted(scan.dumps, key=lambda d: (d.rank is None, d.rank or 0))[:64]:
            out.extend("  " + line for line in flight.summarize_flight_dump(dump))
    return "\n".join(out) + "\n"


def rank_to_json(log: ranklog.RankLog) -> dict:
    comms = log.comms
    return {
        "rank": log.rank,
        "label": log.label,
        "hosts": log.hosts,
        "pids": log.pids,
        "files": log.sources,
        "nccl_version": log.first("nccl_version"),
        "cuda_runtime": log.first("cuda_runtime"),
        "cuda_driver": log.first("cuda_driver"),
        "device": log.first("device"),
        "network": log.network,
        "interface": log.interface,
        "ib_devices": list(log.first("ib_devices") or []),
        "bootstrap_interface": log.first("bootstrap_if"),
        "comms": [
            {
                "comm": c.comm,
                "comm_id": c.comm_id,
                "rank": c.rank,
                "nranks": c.nranks,
                "init_started": c.started,
                "init_complete": c.completed,
                "aborted": c.aborted,
            }
            for c in comms
        ],
        "warnings": log.warn_count,
        "last_warning": log.last_warn.text if log.last_warn is not None else None,
        "timeouts": [
            {
                "pg": t.pg,
                "seq": t.seq,
                "op": t.op,
                "numel_in": t.numel_in,
                "numel_out": t.numel_out,
                "timeout_ms": t.timeout_ms,
                "ran_ms": t.ran_ms,
                "blocking_wait": t.blocking,
            }
            for t in log.timeouts
        ],
        "groups": {
            pg: {
                "last_enqueued": log.last_enqueued(pg),
                "last_completed": log.last_completed(pg),
            }
            for pg in log.groups
        },
        "errors": [
            {"kind": e.kind, "text": e.text, "target": e.target, "ranks": list(e.ranks)}
            for e in log.errors
        ],
    }


def json_report(scan: Scan) -> dict:
    return {
        "version": SCHEMA_VERSION,
        "files": [
            {
                "path": log.path,
                "bytes_read": log.bytes_read,
                "lines": log.lines,
                "cut_lines": log.cut_lines,
                "truncated": log.truncated,
                "error": log.error,
            }
            for log in scan.logs
        ],
        "flight_dumps": [{"path": d.path, "rank": d.rank} for d in scan.dumps],
        "problems": list(scan.problems),
        "verdict": finding_text(scan.findings[0]) if scan.findings else None,
        "findings": [finding_to_json(f) for f in scan.findings],
        "ranks": [rank_to_json(log) for log in scan.ranks if log.said_anything],
        "flight_summaries": [
            {"path": d.path, "rank": d.rank, "lines": flight.summarize_flight_dump(d)}
            for d in scan.dumps
        ],
    }
