"""Compact rank ranges: [0, 1, 2, 3, 5, 8, 9] <-> "0-3,5,8-9"."""

from __future__ import annotations

from collections.abc import Iterable


def format_ranks(ranks: Iterable[int]) -> str:
    """Write a set of ranks as sorted, comma-separated ranges ("0-3,5,8-1023")."""
    return format_sorted(sorted(set(ranks)))


def format_sorted(ordered: list[int]) -> str:
    """format_ranks of ranks already sorted and distinct (not checked: the caller sorted)."""
    if not ordered:
        return ""
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in _runs(ordered))


def _runs(ordered: list[int]) -> list[tuple[int, int]]:
    """The runs of consecutive ranks in `ordered` (sorted, distinct), as (first, last). A
    stretch is one run when its last minus its first is its length less one, so halving
    finds the runs at a cost that grows with the gaps between them, not with the ranks
    (131,072 ranks in a few runs: a few dozen steps)."""
    runs: list[tuple[int, int]] = []
    todo = [(0, len(ordered))]
    while todo:
        low, high = todo.pop()
        if ordered[high - 1] - ordered[low] == high - 1 - low:
            if runs and runs[-1][1] + 1 == ordered[low]:  # a run the halving cut in two
                runs[-1] = (runs[-1][0], ordered[high - 1])
            else:
                runs.append((ordered[low], ordered[high - 1]))
            continue
        middle = (low + high) // 2
        todo += [(middle, high), (low, middle)]  # the left half first
    return runs


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
