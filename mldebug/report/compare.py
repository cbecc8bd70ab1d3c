"""`mldebug compare`'s report: two runs' step time and split side by side, in text or JSON.

step time   run A 24 ms   run B 82 ms   3.42x slower
part            A        B      change
data         2 ms    60 ms     +58 ms
...
B is slower: data (+58 ms a step), on every rank
"""

from __future__ import annotations

from dataclasses import asdict

from mldebug.model.compare import PARTS, Comparison, RunSplit
from mldebug.ranges import format_ranks
from mldebug.textsafe import printable

MAX_RANKS = 16  # rank rows shown; the rest are counted
WORDS = {
    "data": "waiting for data",
    "compute": "compute",
    "collective": "waiting in collectives",
    "sync": "host syncs",
}


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms" if seconds < 10 else f"{seconds:.1f} s"


def _change(a: float, b: float) -> str:
    delta = (b - a) * 1000
    return f"{delta:+.1f} ms"


def _ratio(a: float, b: float) -> str:
    if a <= 0:
        return "-"
    ratio = b / a
    if abs(ratio - 1) < 0.02:
        return "about the same"
    return f"{ratio:.2f}x slower" if ratio > 1 else f"{1 / ratio:.2f}x faster"


def _step_cell(split: RunSplit | None) -> str:
    return _ms(split.step) if split is not None else "-"


def _than(a: float, b: float) -> str:
    words = _ratio(a, b)
    if words == "about the same":
        return "B's steps take about as long as A's"
    return f"B's steps are {words} than A's"


def verdict(comparison: Comparison) -> str:
    """One sentence: what got slower (or faster) and where."""
    c = comparison
    if not c.slower and not c.faster:
        return f"{_than(c.a.step, c.b.step)}: no part changed much"
    said = []
    for part in c.slower:
        i = PARTS.index(part)
        said.append(f"{WORDS[part]} ({_change(c.a.parts[i], c.b.parts[i])} a step)")
    text = _than(c.a.step, c.b.step) + (f"; slower: {', '.join(said)}" if said else "")
    if c.faster:
        faster = []
        for part in c.faster:
            i = PARTS.index(part)
            faster.append(f"{WORDS[part]} ({_change(c.a.parts[i], c.b.parts[i])})")
        text += f"; faster: {', '.join(faster)}"
    both = [p.rank for p in c.ranks if p.a is not None and p.b is not None]
    if c.where and len(c.where) < len(both):
        one = len(c.where) == 1
        text += (
            f"; where: rank{'' if one else 's'} {format_ranks(c.where)} "
            f"(the others wait for {'it' if one else 'them'} in collectives)"
        )
    elif c.slower:
        text += "; on every rank alike"
    return text


def text_report(comparison: Comparison) -> str:
    c = comparison
    lines = [
        f"A: {printable(c.a_name)}",
        f"B: {printable(c.b_name)}",
        "",
        f"{'median step':<24}{_ms(c.a.step):>12}{_ms(c.b.step):>12}   {_ratio(c.a.step, c.b.step)}",
        f"{'  of which':<24}{'A':>12}{'B':>12}   change",
    ]
    for i, part in enumerate(PARTS):
        a, b = c.a.parts[i], c.b.parts[i]
        lines.append(f"{'  ' + WORDS[part]:<24}{_ms(a):>12}{_ms(b):>12}   {_change(a, b)}")
    lines.append(f"{'steps measured':<24}{c.a.steps:>12}{c.b.steps:>12}")
    lines += ["", f"{'rank':<8}{'A step':>12}{'B step':>12}   change"]
    for pair in c.ranks[:MAX_RANKS]:
        change = (
            _ratio(pair.a.step, pair.b.step) if pair.a is not None and pair.b is not None else "-"
        )
        lines.append(f"{pair.rank:<8}{_step_cell(pair.a):>12}{_step_cell(pair.b):>12}   {change}")
    if len(c.ranks) > MAX_RANKS:
        lines.append(f"... and {len(c.ranks) - MAX_RANKS} more ranks")
    lines += ["", verdict(c)]
    lines += [f"note: {printable(note)}" for note in c.notes]
    return "\n".join(lines) + "\n"


def json_report(comparison: Comparison) -> dict:
    data = asdict(comparison)
    data["ratio"] = comparison.ratio
    data["verdict"] = verdict(comparison)
    data["parts"] = list(PARTS)
    return data
