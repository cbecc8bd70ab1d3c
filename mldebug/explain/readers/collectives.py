"""torch's own verdicts on collectives: TORCH_DISTRIBUTED_DEBUG=DETAIL's fingerprint
mismatch ("Detected mismatch between collectives on ranks. Rank 1 is running collective:
CollectiveFingerPrint(SequenceNumber=..., OpType=..., TensorShape=[...], TensorDtypes=...),
but Rank 0 is running collective: ..."), and DDP's reducer ("Expected to have finished
reduction in the prior iteration ...", the parameter indices and names that got no grad,
"Expected to mark a variable ready only once").

Formats from torch's ProcessGroupWrapper.cpp (1.10 to 2.13: the old "running inconsistent
collective" with one rank, the full fingerprints since 1.13) and reducer.cpp. Terminals
wrap these long messages, sometimes in the middle of a word: they are read without spaces.
"""

from __future__ import annotations

import re

from mldebug.explain.finding import KIND_COLLECTIVE_MISMATCH, KIND_DDP_UNUSED, Explained
from mldebug.explain.text import Line, compact, window
from mldebug.ranges import format_ranks
from mldebug.rankrules import is_library_path

RECIPE_MISMATCH = "mismatched-collectives"
RECIPE_UNUSED = "ddp-unused-parameters"

_SIDE = re.compile(r"Rank(\d+)isrunning(?:inconsistent)?collective:")
_FIELD = {
    "seq": re.compile(r"SequenceNumber=(\d+)"),
    "op": re.compile(r"OpType=([A-Z_]+?)(?=,|\)|TensorShape|$)"),
    "shape": re.compile(r"TensorShape=\[([\d,]*)\]"),
    "dtype": re.compile(r"TensorDtypes=([A-Za-z0-9]+?)(?=,|\)|TensorDeviceTypes)"),
    "device": re.compile(r"device=(\w+)"),
}
_BARE_OP = re.compile(r"^([A-Z_]{3,})")


def _fields(text: str) -> dict[str, str]:
    if "CollectiveFingerPrint(" not in text[:40]:
        bare = _BARE_OP.match(text)  # 1.13: "but Rank 1 is running collective: REDUCE."
        return {"op": bare.group(1)} if bare else {}
    found = {}
    for name, pattern in _FIELD.items():
        match = pattern.search(text[:2000])
        if match:
            found[name] = match.group(1)
    return found


def _describe(fields: dict[str, str]) -> str:
    parts = [fields.get("op", "a collective")]
    if "shape" in fields:
        parts.append(f"shape [{fields['shape'].replace(',', ', ')}]")
    if "dtype" in fields:
        parts.append(fields["dtype"])
    return " ".join(parts)


_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in ')


def _caller(lines: list[Line], index: int) -> str | None:
    """The user's line that called the collective: the last frame of the traceback above
    that is not a library's."""
    source = lines[index].source
    for earlier in reversed(lines[max(0, index - 60) : index]):
        if earlier.source != source:
            break
        frame = _FRAME.match(earlier.text)
        if frame and not is_library_path(frame.group("file")):
            return f"{frame.group('file')}:{frame.group('line')}"
    return None


def _mismatch(lines: list[Line], index: int) -> Explained | None:
    around = window(lines, index, 0, 16)
    text = compact(" ".join(line.text for line in around))
    start = text.find("Detectedmismatchbetweencollectives")
    sides = list(_SIDE.finditer(text, max(start, 0)))
    if not sides:
        return None
    named = []
    for i, side in enumerate(sides[:2]):
        end = sides[i + 1].start() if i + 1 < len(sides) else len(text)
        named.append((int(side.group(1)[:6]), _fields(text[side.end() : end])))
    ranks = tuple(sorted({rank for rank, _ in named}))
    if len(named) == 1:
        rank, fields = named[0]
        summary = (
            f"rank {rank} called {_describe(fields)} where the other ranks called another "
            "collective (TORCH_DISTRIBUTED_DEBUG=DETAIL): the ranks no longer run the same "
            "sequence of collectives"
        )
        note = "torch names only the rank that differs: the collective the others ran is not said"
    else:
        (a, fa), (b, fb) = named
        differ = [
            what
            for what, key in (("op", "op"), ("shape", "shape"), ("dtype", "dtype"))
            if fa.get(key) and fb.get(key) and fa[key] != fb[key]
        ]
        seq = fa.get("seq") or fb.get("seq")
        summary = (
            f"rank {a} called {_describe(fa)} while rank {b} called {_describe(fb)}"
            + (f" (collective #{seq})" if seq and fa.get("seq") == fb.get("seq") else "")
            + f": the ranks disagree on the {' and '.join(differ) or 'collective'}"
            + (
                " (a tensor whose size depends on the rank's data: padding, a ragged last "
                "batch, a rank-dependent branch)"
                if differ == ["shape"]
                else " (a rank took another branch, or skipped or added a collective)"
            )
        )
        note = (
            "torch names the first pair of ranks that differ; other ranks may differ too, "
            "and which of the two is wrong is not said"
        )
    return Explained(
        KIND_COLLECTIVE_MISMATCH,
        summary,
        0.95,
        RECIPE_MISMATCH,
        location=_caller(lines, index),
        detail="; ".join(f"rank {rank}: {_describe(fields)}" for rank, fields in sorted(named)),
        fix="make every rank call the same collectives, in the same order, with tensors of "
        "the same shape and dtype; the rank's traceback names the line that called it",
        ranks=ranks,
        note=note,
    ).cited([line for line in around if not line.text.lstrip().startswith(("File ", "Traceback"))])


_NO_GRAD = re.compile(
    r"Parameter(?P<idx> indices)?s? which did not receive grad for rank (?P<rank>\d+): (?P<what>.*)"
)


def _unused(lines: list[Line], index: int) -> Explained:
    around = window(lines, index, 0, 14)
    indices: dict[int, str] = {}
    names: dict[int, str] = {}
    cited = [lines[index]]
    for line in around:
        match = _NO_GRAD.search(line.text)
        if match:
            rank = int(match.group("rank")[:6])
            (indices if match.group("idx") else names)[rank] = match.group("what").strip()[:300]
            cited.append(line)
    fallback = {lines[index].rank} - {None}
    ranks: tuple[int, ...] = tuple(
        sorted({*indices, *names} or {r for r in fallback if r is not None})
    )
    once = "mark a variable ready only once" in lines[index].text
    what = ""
    for shown in ranks[:2]:
        if shown in names:
            what += f"; on rank {shown} these got no gradient: {names[shown][:200]}"
        elif shown in indices:
            what += f"; on rank {shown} parameter indices {indices[shown][:120]} got no gradient"
    if once:
        summary = (
            "DDP saw a parameter's gradient twice in one backward (\"Expected to mark a variable "
            'ready only once"): the module is used twice per step, or activation '
            "checkpointing re-runs it while find_unused_parameters=True" + what
        )
        fix = (
            "use static_graph=True (or _set_static_graph()), or use_reentrant=False in "
            "torch.utils.checkpoint; do not call the wrapped module twice per backward"
        )
    else:
        summary = (
            'DDP finished a step while some parameters never got a gradient ("Expected to '
            'have finished reduction in the prior iteration"): the forward did not use them, '
            "or part of the output did not reach the loss" + what
        )
        fix = (
            "find where those parameters are skipped in forward (a branch, a frozen head, an "
            "output left out of the loss); pass find_unused_parameters=True only if skipping "
            "them is intended"
        )
    note = ""
    if not indices and not names:
        note = (
            "the paste does not list which parameters: TORCH_DISTRIBUTED_DEBUG=INFO (or "
            "DETAIL) makes torch print their names"
        )
    elif ranks:
        note = f"the list is rank {format_ranks(ranks)}'s; other ranks may miss other parameters"
    return Explained(
        KIND_DDP_UNUSED, summary, 0.95, RECIPE_UNUSED, fix=fix, ranks=ranks, note=note
    ).cited(cited)


def read(lines: list[Line]) -> list[Explained]:
    found: list[Explained] = []
    seen: set[tuple] = set()
    by_where: dict = {}  # built once, on the first repeat
    for index, line in enumerate(lines):
        text = line.text
        if "mismatch" in text and "collectives" in text and "Detected" in text:
            got = _mismatch(lines, index)
            if got is None:
                continue
            # Each rank raises it, naming itself first: one finding, every rank's lines.
            same = next((i for i, f in enumerate(found) if f.detail == got.detail), None)
            if same is None:
                found.append(got)
            else:
                by_where = by_where or {line.where: line for line in lines}
                cited = [by_where[w] for w in (*found[same].lines, *got.lines)]
                found[same] = found[same].cited(cited)
        elif "Expected to have finished reduction" in text or (
            "mark a variable ready only once" in text
        ):
            got = _unused(lines, index)
            if (got.kind, got.ranks) not in seen:
                seen.add((got.kind, got.ranks))
                found.append(got)
        elif "did not receive grad for rank" in text and not any(
            f.kind == KIND_DDP_UNUSED for f in found
        ):
            found.append(_unused(lines, index))
    return found
