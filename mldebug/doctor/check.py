"""What a doctor check says: a status, a detail, the recipe to read; and a check to run."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

OK = "OK"
WARN = "WARN"
FAIL = "FAIL"
SKIP = "SKIP"
STATUSES = (OK, WARN, FAIL, SKIP)


@dataclass(frozen=True)
class Check:
    name: str
    status: str
    detail: str
    recipe: str | None = None

    def to_json(self) -> dict:
        return asdict(self)  # every field, by its name


@dataclass(frozen=True)
class Probe:
    """A check to run: its name (for a timeout's report), the function, its recipe."""

    name: str
    run: Callable[[], Sequence[Check]]
    recipe: str | None = None
    timeout: float = 10.0
