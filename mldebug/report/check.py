"""`mldebug check`'s report: the verdict (outliers and failures first), then the tables —
per rank, per node, the collectives, the links between nodes — as text or `--json`.
Renders a `CheckVerdict`; decides nothing."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from mldebug.model import SEVERITY_INFO
from mldebug.model.check import CheckRank, CheckVerdict
from mldebug.ranges import format_ranks
from mldebug.rankrules import human_bytes
from mldebug.report.jsonout import finding_to_json
from mldebug.textsafe import one_line
from mldebug.wording import finding_text, severity_mark

JSON_FORMAT = "mldebug-check"
JSON_VERSION = 1


def _table(header: Sequence[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(str(c)) for c in column) for column in zip(header, *rows, strict=True)]
    lines = []
    for row in [list(header), *rows]:
        lines.append("  " + "  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)))
    return [line.rstrip() for line in lines]


def _rate(tflops: float | None) -> str:
    if tflops is None:
        return "-"
    return f"{tflops:.3g}"


def _unit(verdict: CheckVerdict) -> tuple[str, float]:
    """TFLOPS where devices reach one, else GFLOPS (a CPU's figures stay readable)."""
    rates = [d.tflops for d in verdict.devices]
    return ("TFLOPS", 1.0) if rates and max(rates) >= 1 else ("GFLOPS", 1000.0)


def _header(verdict: CheckVerdict, run_dir: str | None) -> str:
    results = verdict.results
    hosts = sorted({r.host for r in results.ranks if r.host})
    backends = sorted({r.backend for r in results.ranks if r.backend})
    gpu = any(r.gpu for r in results.ranks)
    world = results.world_size or len(results.ranks)
    text = (
        f"mldebug check: {world} rank{'s' if world != 1 else ''} on {len(hosts)} "
        f"node{'s' if len(hosts) != 1 else ''}"
    )
    if backends:
        text += f", {'/'.join(backends)}"
    if not gpu and any(r.started for r in results.ranks):
        text += ", no GPU: CPU variants (fp32 matmul, gloo)"
    if run_dir:
        text += f"\n  run {one_line(run_dir)}"
    return text


def _verdict_lines(verdict: CheckVerdict) -> list[str]:
    if not verdict.findings:
        return ["Verdict: nothing measured"]
    first = verdict.findings[0]
    lines = [f"Verdict: {one_line(finding_text(first))}"]
    if first.detail:
        lines.append(f"  {one_line(first.detail)}")
    if first.recipe:
        lead = "if it is too slow" if first.severity == SEVERITY_INFO else "what to do"
        lines.append(f"  {lead}: mldebug recipes {first.recipe}")
    if len(verdict.findings) > 1:
        lines += ["", "Findings"]
        for finding in verdict.findings:
            recipe = f"  [recipe {finding.recipe}]" if finding.recipe else ""
            lines.append(
                f"  {severity_mark(finding.severity)} {finding.kind:<12} "
                f"{format_ranks(finding.ranks):<8} {one_line(finding_text(finding))}{recipe}"
            )
            if finding.detail and finding.severity != SEVERITY_INFO:
                lines.append(f"      {one_line(finding.detail)}")
    return lines


def _joined(rank: CheckRank) -> str:
    if rank.joined:
        return "yes"
    if rank.joined is False:
        return f"no ({rank.failed_step or '?'})"
    return "-" if rank.started else "never started"


def _ranks_table(verdict: CheckVerdict) -> list[str]:
    unit, scale = _unit(verdict)
    dtypes = sorted(verdict.medians)
    rates = {(d.rank, d.dtype): d for d in verdict.devices}
    header = ["rank", "host", "device", "joined"]
    for dtype in dtypes:
        header += [f"{dtype} {unit}", "x median"]
    header += ["transport", "time"]
    rows = []
    for rank in verdict.results.ranks:
        row = [
            str(rank.rank),
            one_line(rank.host or "-"),
            one_line(rank.device_name or rank.device or "-"),
            _joined(rank),
        ]
        for dtype in dtypes:
            rate = rates.get((rank.rank, dtype))
            row.append(_rate(rate.tflops * scale) if rate else "-")
            row.append(f"{rate.ratio:.2f}" if rate and rate.ratio is not None else "-")
        row.append(one_line(rank.transport or "-"))
        row.append(f"{rank.seconds:.1f}s" if rank.seconds is not None else "-")
        rows.append(row)
    return ["Ranks", *_table(header, rows)]


def _nodes_table(verdict: CheckVerdict) -> list[str]:
    unit, scale = _unit(verdict)
    by_host: dict[str, list[CheckRank]] = {}
    for rank in verdict.results.ranks:
        by_host.setdefault(rank.host or "?", []).append(rank)
    header = ["node", "ranks", "joined", f"median {unit}", "slowest rank"]
    rows = []
    for host, ranks in sorted(by_host.items()):
        numbers = {r.rank for r in ranks}
        devices = [d for d in verdict.devices if d.rank in numbers]
        main = [d for d in devices if d.dtype == min(verdict.medians, default="")] or devices
        slowest = min(main, key=lambda d: d.ratio or 1.0, default=None)
        rows.append(
            [
                one_line(host),
                format_ranks(numbers),
                format_ranks(r.rank for r in ranks if r.joined) or "none",
                _rate(statistics.median(d.tflops for d in main) * scale) if main else "-",
                f"rank {slowest.rank} ({slowest.ratio:.2f}x)"
                if slowest and slowest.ratio is not None
                else "-",
            ]
        )
    return ["Nodes", *_table(header, rows)]


def _collectives_table(verdict: CheckVerdict) -> list[str]:
    if not verdict.bandwidth:
        return []
    group = max(b.ranks for b in verdict.bandwidth)
    header = ["op", "size", "time", "algbw GB/s", "busbw GB/s"]
    rows = [
        [
            b.op,
            human_bytes(b.bytes),
            f"{b.seconds * 1e3:.3g} ms",
            f"{b.algbw:.3g}",
            f"{b.busbw:.3g}",
        ]
        for b in verdict.bandwidth
    ]
    title = f"Collectives ({group} ranks; the slowest rank's mean time; nccl-tests' algbw, busbw)"
    lines = [title, *_table(header, rows)]
    if verdict.results.unsupported:
        lines.append(f"  not in this backend: {', '.join(verdict.results.unsupported)}")
    return lines


def _links_table(verdict: CheckVerdict) -> list[str]:
    if not verdict.links:
        return []
    header = ["nodes", "ranks", "busbw GB/s", "x median"]
    rows = [
        [
            f"{one_line(a)} - {one_line(b)}",
            f"{link.ranks[0]},{link.ranks[1]}",
            f"{link.busbw:.3g}",
            f"{link.ratio:.2f}" if link.ratio is not None else "-",
        ]
        for link in verdict.links
        for a, b in [link.hosts]
    ]
    return ["Links between nodes (send/recv between each node's first rank)", *_table(header, rows)]


def render_text(verdict: CheckVerdict, run_dir: str | None = None) -> str:
    blocks = [
        [_header(verdict, run_dir)],
        _verdict_lines(verdict),
        _ranks_table(verdict),
        _nodes_table(verdict),
        _collectives_table(verdict),
        _links_table(verdict),
    ]
    return "\n\n".join("\n".join(block) for block in blocks if block) + "\n"


def to_json(verdict: CheckVerdict, run_dir: str | None = None) -> dict:
    results = verdict.results
    rates: dict[int, dict] = {}
    for d in verdict.devices:
        rates.setdefault(d.rank, {})[d.dtype] = {"tflops": d.tflops, "ratio": d.ratio}
    return {
        "format": JSON_FORMAT,
        "version": JSON_VERSION,
        "run_dir": run_dir,
        "world_size": results.world_size,
        "gpu": any(r.gpu for r in results.ranks),
        "time_limit_hit": results.time_limit_hit,
        "verdict": finding_text(verdict.findings[0]) if verdict.findings else None,
        "findings": [finding_to_json(f) for f in verdict.findings],
        "ranks": [
            {
                "rank": r.rank,
                "host": r.host,
                "pid": r.pid,
                "device": r.device,
                "device_name": r.device_name,
                "backend": r.backend,
                "joined": r.joined,
                "failed_step": r.failed_step,
                "error": r.error,
                "finished": r.finished,
                "seconds": r.seconds,
                "transport": r.transport,
                "compute": rates.get(r.rank, {}),
                "said": list(r.said) if r.joined is False or not r.finished else [],
            }
            for r in results.ranks
        ],
        "medians_tflops": dict(verdict.medians),
        "collectives": [
            {
                "op": b.op,
                "bytes": b.bytes,
                "seconds": b.seconds,
                "ranks": b.ranks,
                "algbw_gbps": b.algbw,
                "busbw_gbps": b.busbw,
            }
            for b in verdict.bandwidth
        ],
        "unsupported": list(results.unsupported),
        "links": [
            {
                "hosts": list(x.hosts),
                "ranks": list(x.ranks),
                "busbw_gbps": x.busbw,
                "ratio": x.ratio,
            }
            for x in verdict.links
        ],
    }
