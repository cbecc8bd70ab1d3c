"""The timing table of `mldebug dump`: per rank its step time and where the time goes.

    rank  step    waiting  data  sync  compute  last at  arrival
    2     118 ms   3%       14%   0%    83%      89%     1 straggler
    0     118 ms  27%       13%   0%    60%       6%     2

Rows from the agents' state.json (source "agent") or from `dump --profile`'s sampled stacks
(source "sampling": shares of samples, no step time). Large jobs show the ranks that arrive
last most often first, then a count of the rest. `timing_to_json` is the same for --json.
"""

from __future__ import annotations

from dataclasses import asdict

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from mldebug.model.timing import TimingRow, TimingTable

MAX_ROWS = 16  # rows shown; the ranks after them are counted
SPARK = "▁▂▃▄▅▆▇█"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.0f}%"


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1000:.0f} ms" if value < 10 else f"{value:.1f} s"


def sparkline(values: tuple[float, ...] | list[float], width: int = 24) -> str:
    """Step times as bars, the newest `width` of them, from the window's fastest step (lowest
    bar) to its slowest (highest): a pause or a slow spell stands out."""
    shown = list(values)[-width:]
    if not shown:
        return ""
    low, high = min(shown), max(shown)
    if high - low <= 1e-9:
        return SPARK[len(SPARK) // 2] * len(shown)
    top = len(SPARK) - 1
    return "".join(SPARK[round((v - low) / (high - low) * top)] for v in shown)


def agent_cells(row: TimingRow) -> list[str]:
    """An agent row's step time and shares, as `dump` and the Timing tab show them."""
    return [
        _ms(row.step_time),
        _pct(row.waiting),
        _pct(row.data),
        _pct(row.sync),
        _pct(row.compute),
        _pct(row.last_share),
    ]


def ordered_rows(table: TimingTable) -> list[TimingRow]:
    """Stragglers first, then by arrival order (last arriver first), then by rank."""
    return sorted(
        table.rows,
        key=lambda r: (not r.straggler, r.arrival if r.arrival is not None else 1 << 30, r.rank),
    )


def timing_part(table: TimingTable | None) -> RenderableType | None:
    if table is None or not table.rows:
        return None
    sampling = table.source == "sampling"
    title = "Where the time goes, " + ("share of samples" if sampling else "median share of a step")
    grid = Table(title=title, title_justify="left", show_edge=False, box=None, pad_edge=False)
    names = ["rank"] + (["samples"] if sampling else ["step"])
    names += ["waiting", "data", "sync", "compute"] if not sampling else ["collective", "data"]
    names += ["elsewhere"] if sampling else ["last at", "arrival"]
    for name in names:
        grid.add_column(name, justify="left" if name == "rank" else "right")
    grid.add_column("")
    rows = ordered_rows(table)
    for row in rows[:MAX_ROWS]:
        mark = Text("straggler", style="bold yellow") if row.straggler else Text("")
        if sampling:
            cells = [str(row.samples or 0), _pct(row.waiting), _pct(row.data), _pct(row.compute)]
        else:
            cells = [*agent_cells(row), "-" if row.arrival is None else str(row.arrival)]
        grid.add_row(Text(str(row.rank)), *(Text(c) for c in cells), mark)
    parts: list[RenderableType] = [grid]
    if len(rows) > MAX_ROWS:
        parts.append(Text(f"... {len(rows) - MAX_ROWS} more ranks (mldebug dump --json)"))
    if table.note:
        parts.append(Text(table.note, style="dim"))
    return Group(*parts)


def timing_to_json(table: TimingTable | None) -> dict | None:
    if table is None:
        return None
    rows = [{**asdict(row), "step_times": list(row.step_times)} for row in table.rows]
    found = {"source": table.source, "compared": table.collectives, "note": table.note}
    return found | {"ranks": rows}
