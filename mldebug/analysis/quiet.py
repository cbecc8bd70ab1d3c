"""What a quiet job is doing: the hang watchdog's question, answered from one snapshot.

`mldebug run --hang-timeout SECS` sees that no step or collective moved for SECS; the dump
it then takes says why. Three answers:

  * HANG: the dump has an error finding about the job (ranks wait for a rank that is
    elsewhere, a collective that never completes, a frozen rank, a crash...; not "no rank
    could be read"). Only this one may stop the job (`--on-hang stop`).
  * WORKING: every live rank was read and is running (its stack moves or it uses CPU): an
    evaluation phase, a checkpoint being written, imports and the first compile at the
    start. The place is the deepest user function all ranks are in ("evaluate
    (eval.py:12)"): a quiet phase that comes back at the same place is one the job has, and
    the watchdog learns it.
  * COMPILING: no error, and ranks are inside torch.compile (analysis/compiling.py): the
    others wait for them, which is slow, not hung. Never stops the job.
  * UNSURE: anything else (a wait too short to be graded a hang yet, ranks not read): the
    watchdog looks again later; severity grows with the wait (analysis.severity).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mldebug.analysis.frames import is_user_frame
from mldebug.model import (
    KIND_COMPILING,
    KIND_FR_UNREAD,
    KIND_NODE_UNREACHABLE,
    KIND_UNREADABLE,
    SEVERITY_ERROR,
    STATE_RUNNING,
    Frame,
    JobSnapshot,
    RankView,
)
from mldebug.rankrules import frame_label

HANG = "hang"
WORKING = "working"
COMPILING = "compiling"
UNSURE = "unsure"
# Errors about the reading, not the job: a job nobody could read is not known to hang.
NOT_ABOUT_THE_JOB = frozenset({KIND_UNREADABLE, KIND_FR_UNREAD, KIND_NODE_UNREACHABLE})


@dataclass(frozen=True)
class QuietVerdict:
    kind: str  # HANG, WORKING, COMPILING or UNSURE
    place: tuple[str, str] | None = None  # (file, function) all ranks are in, when WORKING
    where: str = ""  # that place as a person reads it: "evaluate (eval.py:12)"


def _user_frames(view: RankView) -> list[Frame]:
    if not view.threads:
        return []
    return [frame for frame in view.threads[0].frames if is_user_frame(frame)]


def common_place(views: Sequence[RankView]) -> Frame | None:
    """The deepest user frame (by file and function) on every rank's main stack, outermost
    first: where all of them are, whatever line each is at."""
    stacks = [_user_frames(view) for view in views]
    if not stacks or not all(stacks):
        return None
    deepest = None
    for depth in range(min(len(stack) for stack in stacks)):
        frames = [stack[depth] for stack in stacks]
        first = frames[0]
        if any((f.file, f.function) != (first.file, first.function) for f in frames[1:]):
            break
        deepest = first
    return deepest


def judge_quiet(snapshot: JobSnapshot) -> QuietVerdict:
    if any(
        f.severity == SEVERITY_ERROR and f.kind not in NOT_ABOUT_THE_JOB for f in snapshot.findings
    ):
        return QuietVerdict(HANG)
    if any(f.kind == KIND_COMPILING for f in snapshot.findings):
        return QuietVerdict(COMPILING)
    live = [v for v in snapshot.ranks if not v.gone]
    if not live or any(v.state != STATE_RUNNING for v in live):
        return QuietVerdict(UNSURE)
    place = common_place(live)
    if place is None:
        return QuietVerdict(WORKING, None, "their own code")
    return QuietVerdict(WORKING, (place.file, place.function), frame_label(place))
