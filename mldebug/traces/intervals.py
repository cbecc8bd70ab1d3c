"""Unions of time intervals, kept in bounded memory.

A rank's trace has millions of nested CPU ops; only the union of their time matters (how
long something computed), so intervals are collected in flat arrays and merged into their
union whenever the arrays grow past a bound (nested ops collapse into their parent's span).
"""

from __future__ import annotations

from array import array

COMPACT_AT = 200_000  # intervals kept before they are merged into their union


class Union:
    """A set of [start, end) intervals (microseconds), merged as it grows."""

    def __init__(self) -> None:
        self.starts = array("d")
        self.ends = array("d")
        self._merged = True

    def add(self, start: float, end: float) -> None:
        if end <= start:
            return
        self.starts.append(start)
        self.ends.append(end)
        self._merged = False
        if len(self.starts) >= COMPACT_AT:
            self.merge()

    def merge(self) -> Union:
        if self._merged:
            return self
        pairs = sorted(zip(self.starts, self.ends, strict=True))
        starts, ends = array("d"), array("d")
        for start, end in pairs:
            if ends and start <= ends[-1]:
                if end > ends[-1]:
                    ends[-1] = end
            else:
                starts.append(start)
                ends.append(end)
        self.starts, self.ends, self._merged = starts, ends, True
        return self

    def spans(self) -> list[tuple[float, float]]:
        self.merge()
        return list(zip(self.starts, self.ends, strict=True))

    def __len__(self) -> int:
        return len(self.starts)


def clip(spans: list[tuple[float, float]], start: float, end: float) -> list[tuple[float, float]]:
    return [(max(a, start), min(b, end)) for a, b in spans if b > start and a < end]


def total(spans: list[tuple[float, float]]) -> float:
    return sum(b - a for a, b in spans)


def union(*groups: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged = Union()
    for spans in groups:
        for a, b in spans:
            merged.add(a, b)
    return merged.spans()


def minus(spans: list[tuple[float, float]], cut: list[tuple[float, float]]) -> float:
    """The time of `spans` (merged, sorted) outside `cut` (merged, sorted)."""
    left = 0.0
    j = 0
    for a, b in spans:
        while j < len(cut) and cut[j][1] <= a:
            j += 1
        point, k = a, j
        while k < len(cut) and cut[k][0] < b:
            if cut[k][0] > point:
                left += cut[k][0] - point
            point = max(point, cut[k][1])
            k += 1
        if point < b:
            left += b - point
    return left
