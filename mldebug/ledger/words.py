"""The collective ledger's sentences: every source says a verdict in these words."""

from __future__ import annotations

from collections.abc import Sequence

import mldebug.ledger.forms as forms
import mldebug.ledger.rules as rules
from mldebug.ledger.forms import Behind, Call, GroupVerdict, Side, numel
from mldebug.wording import ranks_text
from mldebug.wording import verb as _verb

MAX_SIDES = 4  # sides of one mismatch named in its text


def on_group(group: str) -> str:
    return "" if group == rules.DEFAULT_GROUP else f" on group {group}"


def call_text(op: str, seq: int, group: str) -> str:
    """`all_reduce #6`, `all_reduce #6 on group 1`."""
    return f"{op} #{seq}{on_group(group)}"


def tensors_text(call: Call) -> str:
    """`float32[4]`, `float32[4], int64[2]`; `?` for a dtype not recorded."""
    dtypes = list(call.dtypes[: len(call.shapes)]) + ["?"] * (len(call.shapes) - len(call.dtypes))
    return ", ".join(f"{d}{list(s)}" for d, s in zip(dtypes, call.shapes, strict=True))


def behind_text(ranks: Sequence[int], op: str, seq: int, group: str) -> str:
    """The behind verdict's words: `rank 2 never called all_reduce #6 on group 1`."""
    return f"{ranks_text(ranks)} never called {call_text(op, seq, group)}"


def behind_count_text(
    ranks: Sequence[int], top: int, last: int, last_call: Call | None, group: str
) -> str:
    """`: 3 calls behind, its last was all_reduce #35 (a.py:9)`, `: it has made no call on
    it yet`; nothing when it is one call behind."""
    if last == 0:
        return f": {_verb(ranks, 'it has', 'they have')} made no call on it yet"
    if top - last > 1:
        what = call_text(last_call.op, last, group) if last_call else f"#{last}"
        at = f" ({last_call.site})" if last_call is not None and last_call.site else ""
        return f": {top - last} calls behind, {_verb(ranks, 'its', 'their')} last was {what}{at}"
    return ""


def behind_sentence(behind: Behind, verdict: GroupVerdict) -> str:
    """The behind verdict as every source says it: `rank 2 never called all_reduce #38
    (a.py:9): 3 calls behind, its last was all_reduce #35 (a.py:9)`."""
    call = verdict.call
    op = call.op if call is not None else "a collective"
    at = f" ({call.site})" if call is not None and call.site else ""
    return (
        behind_text(behind.ranks, op, verdict.top, verdict.group)
        + at
        + behind_count_text(behind.ranks, verdict.top, behind.last, behind.last_call, verdict.group)
    )


def hang_text(count: int, op: str, seq: int, group: str) -> str:
    return (
        f"all {count} ranks made {call_text(op, seq, group)} and none has seen it complete, "
        "and none is behind: the collective itself does not complete"
    )


def _side_text(side: Side, kind: str) -> str:
    call = side.call
    verb = _verb(side.ranks, "calls", "call")
    if call is None:
        return f"{ranks_text(side.ranks)} {_verb(side.ranks, 'makes', 'make')} no call #N"
    what = call.op
    if kind in (forms.KIND_SHAPES, forms.KIND_DTYPES) and call.shapes:
        what = f"{call.op} of {tensors_text(call)}"
    elif kind == forms.KIND_TOTALS:
        sent = sum(numel(s) for s in call.shapes)
        got = sum(numel(s) for s in call.out_shapes)
        what = f"{call.op} sending {sent} and receiving {got} elements"
    elif kind == forms.KIND_STATE:
        what = f"{call.op} ({call.state})"
    at = f" ({call.site})" if call.site else ""
    return f"{ranks_text(side.ranks)} {verb} {what}{at}"


_WHY = {
    forms.KIND_OP: "different collectives",
    forms.KIND_SHAPES: "different tensors",
    forms.KIND_DTYPES: "different dtypes",
    forms.KIND_TOTALS: "all_to_all calls whose totals differ",
    forms.KIND_STATE: "one collective that only some started",
}


def mismatch_text(
    seq: int, kind: str, sides: Sequence[Side], culprits: Sequence[int], extra: bool, group: str
) -> str:
    """`ranks make different collectives as call #4, which never match: ranks 0-2 call
    all_reduce (a.py:3); rank 3 calls broadcast (a.py:9): rank 3 is the odd one out`."""
    texts = "; ".join(_side_text(s, kind).replace("#N", f"#{seq}") for s in sides[:MAX_SIDES])
    if len(sides) > MAX_SIDES:
        texts += f"; and {len(sides) - MAX_SIDES} more"
    text = f"ranks make {_WHY[kind]} as call #{seq}{on_group(group)}, which never match: {texts}"
    if culprits and extra:
        op = next(s.call.op for s in sides if s.call is not None and s.ranks[0] in culprits)
        text += (
            f": {ranks_text(culprits)} made one {op} more than the others (a loop ran once more)"
        )
    elif culprits:
        text += f": {ranks_text(culprits)} {_verb(culprits, 'is', 'are')} the odd one out"
    return text
