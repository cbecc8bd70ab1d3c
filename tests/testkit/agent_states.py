"""Agent states and stacks of a job, for the verdict tests: state.json as the agent's own
heartbeat makes it and writes it, read back by the real reader, judged with the stacks by
the real analysis.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from mldebug.agent.heartbeat import DEFAULT_INTERVAL, Heartbeat
from mldebug.analysis.snapshot import build_snapshot
from mldebug.collect.agentstate import read_states
from mldebug.files.safeio import write_json_atomic
from mldebug.model import Frame, RankTarget, StackSample, ThreadStack

NOW = 1_767_225_600.0
TRAIN = "/home/me/proj/train.py"
SITE = f"{TRAIN}:48"
MODULE = Frame("<module>", TRAIN, 200)
MAIN = Frame("main", TRAIN, 180)
TENSOR = "/venv/lib/python3.11/site-packages/torch/_tensor.py"
# Where a rank spins while its NCCL all_reduce does not complete: loss.item().
SPIN = (MODULE, MAIN, Frame("train_step", TRAIN, 52), Frame("item", TENSOR, 1))
LOAD = (MODULE, MAIN, Frame("load_batch", TRAIN, 31))


def pid_of(rank: int) -> int:
    return 4000 + rank


def call(seq, op="all_reduce", enqueued=NOW - 30, completed=None, site=SITE, **extra):
    """A `trace` entry of state.json."""
    entry = {
        "group": "default_pg",
        "seq": seq,
        "op": op,
        "site": site,
        "enqueued": enqueued,
        "completed": completed,
        "async": True,
        "shapes": [[1024]],
        "dtypes": ["float32"],
    }
    entry.update(extra)
    return entry


class _Tracer:
    """The collective trace's part of state.json, as agent/collectives.py's Tracer gives it."""

    def __init__(self, groups: dict, trace: list) -> None:
        self.groups, self.trace = groups, trace

    def snapshot(self) -> tuple[dict, list]:
        return self.groups, self.trace


class _Steps:
    def __init__(self, value: int | None, time: float | None) -> None:
        self.value, self.time = value, time


class _Memory:
    def reading(self) -> dict:
        return {"rss": 300 << 20, "cuda": None, "nvml": None}

    def history_rows(self) -> list:
        return []


def state(
    rank: int,
    made: dict | None,
    done_seq: int | None,
    *,
    time: float = NOW - 0.5,
    trace: list | None = None,
    pid: int | None = None,
    interval: float | None = None,
    step: int | None = 12,
) -> dict:
    """A state.json as the agent's heartbeat writes it (agent/heartbeat.py's own document):
    `made` is the last call made (a trace entry), `done_seq` the number of the last call
    complete. Only the tracer, step counter and memory reader are stood in for."""
    groups = {}
    if made is not None:
        group = made["group"]
        enqueued = {k: made[k] for k in ("seq", "op", "site", "shapes", "dtypes", "async")}
        enqueued["time"] = made["enqueued"]
        groups[group] = {"size": 4, "enqueued": enqueued, "completed": None}
        if done_seq:
            groups[group]["completed"] = {"seq": done_seq, "op": made["op"], "time": time - 40}
    return heartbeat_state(
        rank,
        pid_of(rank) if pid is None else pid,
        time,
        groups=groups,
        trace=trace if trace is not None else ([made] if made else []),
        step=step,
        step_time=NOW - 40,
        started=NOW - 600,
        interval=interval if interval is not None else DEFAULT_INTERVAL,
    )


def heartbeat_state(
    rank: int,
    pid: int,
    time: float,
    *,
    groups: dict | None = None,
    trace: list | None = None,
    step: int | None = None,
    step_time: float | None = None,
    started: float | None = None,
    interval: float = DEFAULT_INTERVAL,
) -> dict:
    """The document the agent's heartbeat writes (Heartbeat.state) for a rank whose trace,
    step counter and memory say what is given, at `time` by the rank's clock."""
    tracer = _Tracer(groups or {}, trace or [])
    beat = heartbeat(rank, time, tracer, _Steps(step, step_time), _Memory(), started, interval)
    beat.pid = pid
    return beat.state()


def heartbeat(
    rank: int,
    time: float,
    tracer,
    steps=None,
    memory=None,
    started: float | None = None,
    interval: float = DEFAULT_INTERVAL,
    path: Path | None = None,
) -> Heartbeat:
    """The agent's own Heartbeat of a rank at `time` by its clock (started 600 s before
    unless told), over the tracer, step counter and memory reader given; it writes
    state.json at `path` through the agent's atomic writer."""
    return Heartbeat(
        path,
        write_json_atomic if path is not None else None,
        rank,
        started if started is not None else time - 600,
        tracer,
        steps,
        memory,
        interval,
        clock=lambda: time,
    )


# The agent's own thread, as py-spy shows it in every rank the agent runs in.
HEARTBEAT = ThreadStack(
    2, "mldebug-heartbeat", (Frame("_run", "/opt/mldebug/agent/heartbeat.py", 120),)
)


def samples(rank: int, frames, busy: bool = True) -> list[StackSample]:
    """Three readings 0.4 s apart of a rank on `frames`, its main thread busy or idle."""
    target = RankTarget(pid=pid_of(rank), rank=rank, world_size=4)
    cpu = (0.0, 0.4, 0.8) if busy else (0.0, 0.0, 0.0)
    return [
        StackSample(
            target,
            NOW - 1 + 0.4 * i,
            (ThreadStack(1, "MainThread", frames, active=busy), HEARTBEAT),
            cpu_seconds=cpu[i],
            main_cpu_seconds=cpu[i],
        )
        for i in range(3)
    ]


def write_run(tmp_path: Path, states: dict[int, dict]) -> Path:
    root = tmp_path / "run"
    root.mkdir(parents=True, exist_ok=True)
    for rank, data in states.items():
        folder = root / "ranks" / str(rank)
        folder.mkdir(parents=True, exist_ok=True)
        write_json_atomic(folder / "state.json", data)  # as the heartbeat writes it
    root.chmod(0o700)
    return root


def snapshot(
    tmp_path, states: dict[int, dict], stacks: dict[int, tuple], busy=None, now=NOW, cpu_waits=None
):
    """The job's snapshot: its ranks' stacks and the states the real reader reads (with
    `cpu_waits`, rank -> what the reader would have found of its main thread's wait for a
    CPU in its step under way: the pids here are no real ranks' to read /proc of)."""
    root = write_run(tmp_path, states)
    targets = [
        RankTarget(pid=pid_of(r), rank=r, world_size=len(stacks), run_dir=str(root)) for r in stacks
    ]
    busy = busy or {}
    by_pid = {pid_of(r): samples(r, frames, busy.get(r, True)) for r, frames in stacks.items()}
    agents = read_states(targets)
    for rank, seconds in (cpu_waits or {}).items():
        agents[pid_of(rank)] = replace(agents[pid_of(rank)], step_waited_for_cpu=seconds)
    return build_snapshot(targets, by_pid, world_size=len(stacks), agents=agents, now=now)
