"""state.json written by the agent's own writer, for tests: the Tracer's Group and Call
records filled in as the tracer fills them, written by the Heartbeat through rundir's atomic
writer (so a test's state has exactly the agent's format, docs/agent.md)."""

from __future__ import annotations

from dataclasses import dataclass

from mldebug import rankrules
from mldebug.agent import collectives
from mldebug.files import rundir, safeio
from testkit.agent_states import heartbeat


@dataclass(frozen=True)
class Made:
    """One call a rank made: op, where, when; `completed` None while it is pending."""

    op: str
    site: str | None = None
    enqueued: float = 0.0
    completed: float | None = None
    shapes: tuple[tuple[int, ...], ...] = ((4,),)
    dtypes: tuple[str, ...] = ("float32",)
    error: str | None = None  # what the call raised (it then counts as completed)


def write_state(
    paths: rundir.RunPaths,
    rank: int,
    groups: dict[str, list[Made]],
    now: float,
    sizes: dict[str, int] | None = None,
    interval: float = 1.0,
) -> None:
    """ranks/<rank>/state.json after the rank made `groups[name]` calls on each group, in
    order, as the agent's Heartbeat writes it at time `now`."""
    safeio.make_private_dir(paths.ranks_dir)
    safeio.make_private_dir(paths.rank_dir(rank))
    tracer = collectives.Tracer(rankrules)
    for name, calls in groups.items():
        group = collectives.Group(name, (sizes or {}).get(name))
        tracer.groups[name] = group
        for seq, made in enumerate(calls, 1):
            call = collectives.Call(
                group,
                seq,
                made.op,
                made.site,
                made.enqueued,
                False,
                [list(s) for s in made.shapes],
                list(made.dtypes),
                None,
            )
            group.seq = seq
            group.enqueued = call
            call.error = made.error
            if made.completed is not None:
                call.completed = made.completed
                group.done(call)
            tracer.trace.append(call)
    beat = heartbeat(
        rank, now, tracer, started=now - 100, interval=interval, path=paths.state_file(rank)
    )
    if not beat.write_once():
        raise OSError(f"state.json of rank {rank} could not be written")
