"""Compact rank ranges: [0, 1, 2, 3, 5, 8, 9] <-> "0-3,5,8-9"."""

from __future__ import annotations

from collections.abc import Iterable


def format_ranks(ranks: Iterable[int]) -> str:
    """Write a set of ranks as sorted, comma-separated ranges ("0-3,5,8-1023")."""
    ordered = sorted(set(ranks))
    if not ordered:
        return ""
    parts: list[str] = []
    start = prev = ordered[0]
    for rank in ordered[1:]:
        if rank == prev + 1:
            prev = rank
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = rank
    parts.append(str(start) if start == prev else f"{start}-{prev}")
    return ",".join(parts)


MAX_RANK = (1 << 20) - 1  # no job has more ranks: "0-99999999999" is a typo, not a set


def parse_ranks(text: str) -> list[int]:
    """Read "0-3,5" back into [0, 1, 2, 3, 5]; raises ValueError on anything else."""
    ranks: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            low, high = part.split("-", 1)
            first, last = int(low), int(high)
            if first > last or first < 0 or last > MAX_RANK:
                raise ValueError(f"bad rank range {part!r}")
            ranks.update(range(first, last + 1))
        else:
            rank = int(part)
            if not 0 <= rank <= MAX_RANK:
                raise ValueError(f"bad rank {part!r}")
            ranks.add(rank)
    return sorted(ranks)
