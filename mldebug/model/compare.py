"""`mldebug compare`: two runs' step time and its split, side by side (plain data, no I/O)."""

from __future__ import annotations

from dataclasses import dataclass

PARTS = ("data", "compute", "collective", "sync")


@dataclass(frozen=True)
class RunSplit:
    """One run (or one rank of it): median seconds a step, and of each part (PARTS' order)."""

    step: float
    parts: tuple[float, float, float, float]
    steps: int  # steps behind the medians


@dataclass(frozen=True)
class RankPair:
    rank: int
    a: RunSplit | None
    b: RunSplit | None


@dataclass(frozen=True)
class Comparison:
    a_name: str
    b_name: str
    a: RunSplit
    b: RunSplit
    ranks: tuple[RankPair, ...]
    slower: tuple[str, ...] = ()  # PARTS that grew noticeably, most first
    faster: tuple[str, ...] = ()
    where: tuple[int, ...] = ()  # ranks whose step grew outside collectives most (B vs A)
    notes: tuple[str, ...] = ()  # world size, loaders... that differ

    @property
    def ratio(self) -> float:
        return self.b.step / self.a.step if self.a.step > 0 else float("inf")
