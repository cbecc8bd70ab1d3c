"""Host lists as SLURM writes them: `node[01-04,07],gpu-[1-3]-ib,login1`.

An entry is literal text with bracket groups; a group holds numbers and ranges separated by
commas, and a range keeps the zero padding of its first bound (`[08-10]` is 08, 09, 10).
Several groups in one entry give every combination, left group outermost, as
`scontrol show hostnames` does. The result keeps the order written and drops repeats.
"""

from __future__ import annotations

import re

MAX_HOSTS = 1 << 16  # no cluster job spans more nodes: "n[0-99999999]" is a typo
MAX_TEXT = 1 << 16
_NAME = re.compile(r"^[A-Za-z0-9._-]*$")  # what a host name (or a part of one) may hold


def _split_top(text: str) -> list[str]:
    """Split at the commas that are outside brackets."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "[":
            depth += 1
            if depth > 1:
                raise ValueError("nested brackets")
        elif char == "]":
            depth -= 1
            if depth < 0:
                raise ValueError("']' without '['")
        elif char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise ValueError("'[' without ']'")
    parts.append(text[start:])
    return parts


def _numbers(group: str) -> list[str]:
    """The numbers of one bracket group, as text with their padding."""
    out: list[str] = []
    for item in group.split(","):
        low, dash, high = item.partition("-")
        if not (low.isascii() and low.isdigit()) or (
            dash and not (high.isascii() and high.isdigit())
        ):
            raise ValueError(f"[{group}]: {item!r} is not a number or a range like 1-4")
        if not dash:
            out.append(low)
            continue
        first, last = int(low), int(high)
        if last < first:
            raise ValueError(f"[{group}]: range {item} goes down")
        if len(out) + last - first + 1 > MAX_HOSTS:
            raise ValueError(f"more than {MAX_HOSTS} hosts")
        width = len(low)
        out.extend(str(n).zfill(width) for n in range(first, last + 1))
    return out


def _entry(entry: str) -> list[str]:
    pieces = re.split(r"\[([^\]]*)\]", entry)  # literal, group, literal, group, ..., literal
    for literal in pieces[0::2]:
        if not _NAME.match(literal):
            raise ValueError(f"{entry!r}: a host name holds letters, digits, '.', '-', '_'")
    names = [pieces[0]]
    for group, literal in zip(pieces[1::2], pieces[2::2], strict=True):
        numbers = _numbers(group)
        if len(names) * len(numbers) > MAX_HOSTS:
            raise ValueError(f"more than {MAX_HOSTS} hosts")
        names = [name + number + literal for name in names for number in numbers]
    if names == [""]:
        raise ValueError("an empty host name")
    return names


def expand(text: str) -> list[str]:
    """Every host a host list names, in order, each once. ValueError on bad syntax."""
    text = text.strip()
    if not text:
        raise ValueError("no hosts given")
    if len(text) > MAX_TEXT:
        raise ValueError(f"longer than {MAX_TEXT} characters")
    seen: dict[str, None] = {}
    for entry in _split_top(text):
        for name in _entry(entry.strip()):
            seen.setdefault(name, None)
            if len(seen) > MAX_HOSTS:
                raise ValueError(f"more than {MAX_HOSTS} hosts")
    return list(seen)


def compress(hosts: list[str]) -> str:
    """A short host list for display: runs of numbered names with one prefix, suffix-free,
    become `prefix[1-3,5]` (padding kept); `expand(compress(h))` gives h back as a set."""
    by_prefix: dict[tuple[str, int], list[int]] = {}
    plain: list[str] = []
    for host in hosts:
        match = re.fullmatch(r"(.*?)(\d+)", host)
        if match is None:
            plain.append(host)
            continue
        digits = match.group(2)
        width = len(digits) if digits.startswith("0") and len(digits) > 1 else 0
        by_prefix.setdefault((match.group(1), width), []).append(int(digits))
    parts = []
    for (prefix, width), numbers in by_prefix.items():
        numbers = sorted(set(numbers))
        if len(numbers) == 1:
            parts.append(f"{prefix}{str(numbers[0]).zfill(width)}")
            continue
        runs: list[str] = []
        start: int | None = numbers[0]  # where the run being read began
        for prev, cur in zip(numbers, [*numbers[1:], None], strict=True):
            if cur is None or cur != prev + 1:
                low, high = str(start).zfill(width), str(prev).zfill(width)
                runs.append(low if start == prev else f"{low}-{high}")
                start = cur
        parts.append(f"{prefix}[{','.join(runs)}]")
    return ",".join(parts + plain)
