"""A finding's facts as lines of a plain-text report (`mldebug nccl`, `mldebug explain`):
each fact it has on a line of its own, under a label, in the order given."""

from __future__ import annotations

from collections.abc import Iterable

from mldebug.textsafe import one_line


def fact_lines(indent: str, facts: Iterable[tuple[str, str | None]]) -> list[str]:
    """`indent` + label + value, one line each, for the facts whose value is there; a value
    comes from a file or a rank, so it is put on one printable line."""
    return [f"{indent}{label}{one_line(value)}" for label, value in facts if value]


def recipe_command(recipe: str | None) -> str | None:
    """How a person reads a finding's recipe."""
    return f"mldebug recipes {recipe}" if recipe else None
