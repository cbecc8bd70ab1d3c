"""`mldebug dump --json`: the snapshot as a stable JSON object.

Contract (scripts rely on it; extend, never rename): an object with `ranks`, `groups` and
`findings`; each finding has `kind`, `ranks` (ints), `summary`, and where known `location`
(`file:line`) and `recipe`. A rank whose in-rank agent writes state.json also has `step`,
`heartbeat_age` (seconds) and `collectives` (per group the last call made and the last
complete, and the newest calls of its trace); they are null without one.
"""

from __future__ import annotations

from collections.abc import Iterable

from mldebug.model import (
    AgentState,
    CollectiveCall,
    Finding,
    Frame,
    JobSnapshot,
    RankView,
    StackGroup,
    ThreadStack,
)
from mldebug.ranges import format_ranks
from mldebug.wording import finding_text

SCHEMA_VERSION = 1
TRACE_ENTRIES = 8  # the newest calls of a rank's collective trace given per rank


def fields_json(value: object, *names: str) -> dict:
    """`value`'s attributes `names`, each under its own name (the JSON keys that are the
    model's field names; a key named otherwise is added beside them)."""
    return {name: getattr(value, name) for name in names}


def frame_to_json(frame: Frame) -> dict:
    return fields_json(frame, "function", "file", "line", "native")


def _frames(frames: Iterable[Frame]) -> list[dict]:
    return [frame_to_json(f) for f in frames]


def thread_to_json(thread: ThreadStack) -> dict:
    fields = fields_json(thread, "thread_id", "name", "os_thread_id", "active", "owns_gil", "pid")
    return {**fields, "frames": _frames(thread.frames)}


def _call_time(call: CollectiveCall | None, when: float | None) -> dict | None:
    if call is None:
        return None
    return {"seq": call.seq, "op": call.op, "site": call.site, "time": when}


def call_to_json(call: CollectiveCall) -> dict:
    return {
        **fields_json(call, "group", "seq", "op", "site", "enqueued", "completed"),
        "async": call.asynchronous,
        "shapes": [list(shape) for shape in call.shapes],
        "dtypes": list(call.dtypes),
        "error": call.error,  # what the call raised (a peer gone, a timeout); null: none
    }


def collectives_to_json(state: AgentState | None) -> dict | None:
    """Where the rank's agent says it is in each group's collectives, and its last calls
    (oldest first); None for a rank without an agent."""
    if state is None:
        return None
    return {
        "groups": {
            g.group: {
                "size": g.size,
                "enqueued": _call_time(g.enqueued, g.enqueued.enqueued if g.enqueued else None),
                "completed": _call_time(
                    g.completed, g.completed.completed if g.completed else None
                ),
            }
            for g in state.groups
        },
        "trace": [call_to_json(c) for c in state.trace[-TRACE_ENTRIES:]],
    }


def rank_to_json(view: RankView) -> dict:
    target = view.target
    return {
        "rank": view.rank,
        "state": view.state,
        "pid": target.pid if target else None,
        "host": target.host if target else None,
        "local_rank": target.local_rank if target else None,
        "collective": view.collective,
        "location": view.user_frame.location if view.user_frame else None,
        "function": view.user_frame.function if view.user_frame else None,
        "cpu_percent": round(view.cpu_percent, 1) if view.cpu_percent is not None else None,
        "rss_bytes": view.rss_bytes,
        "exit_code": view.exit_code,
        "detail": view.detail,
        "dataloader_worker": view.dataloader_worker,
        "stack_source": view.stack_source or "py-spy",
        "step": view.step,
        "heartbeat_age": (round(view.heartbeat_age, 1) if view.heartbeat_age is not None else None),
        "collectives": collectives_to_json(view.agent),
        "threads": [thread_to_json(t) for t in view.threads],
    }


def group_to_json(group: StackGroup) -> dict:
    return {
        "ranks": list(group.ranks),
        "ranks_text": format_ranks(group.ranks),
        "state": group.state,
        "collective": group.collective,
        "location": group.user_frame.location if group.user_frame else None,
        "function": group.user_frame.function if group.user_frame else None,
        "frames": _frames(group.frames),
    }


def finding_to_json(finding: Finding) -> dict:
    return {
        "kind": finding.kind,
        "severity": finding.severity,
        "ranks": list(finding.ranks),
        "ranks_text": format_ranks(finding.ranks),
        "summary": finding_text(finding),
        "location": finding.location,
        "recipe": finding.recipe,
        "detail": finding.detail,
        "parts": [
            {"ranks": list(p.ranks), "label": p.label, "location": p.location}
            for p in finding.parts
        ],
        # the finding as data (docs/dump.md): who waits for the culprits and how long, the
        # collective, what saw it, its facts
        "waiting": list(finding.waiting),
        "waited_s": finding.waited,
        "collective": (
            {
                "group": finding.collective.group,
                "seq": finding.collective.seq,
                "op": finding.collective.op,
            }
            if finding.collective is not None
            else None
        ),
        "sources": list(finding.sources),
        "facts": {name: value for name, value in finding.facts},
    }


def snapshot_to_json(snapshot: JobSnapshot) -> dict:
    from mldebug.report.timing import timing_to_json  # rich comes with it: not for explain's

    return {
        "version": SCHEMA_VERSION,
        "time": snapshot.time,
        "job": snapshot.job,
        "run_dir": snapshot.run_dir,
        "world_size": snapshot.world_size,
        "verdict": finding_text(snapshot.findings[0]) if snapshot.findings else None,
        "findings": [finding_to_json(f) for f in snapshot.findings],
        "groups": [group_to_json(g) for g in snapshot.groups],
        "ranks": [rank_to_json(v) for v in snapshot.ranks],
        "timing": timing_to_json(snapshot.timing),  # report/timing.py
    }
