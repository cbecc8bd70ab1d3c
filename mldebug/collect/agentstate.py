"""Read what a rank's in-rank agent wrote: ranks/<rank>/state.json (docs/agent.md).

The file is data from the rank: read through rundir (no symlink, regular file, capped), and
every field checked for its type and range; a field that is wrong is absent, a file that is
wrong is no state at all. Nothing here raises for a bad file.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path

import mldebug.ledger.rules as rules
from mldebug.collect.agenttiming import parse_timing
from mldebug.collect.eventfiles import parse_time
from mldebug.collect.memstate import parse_census, parse_timeline
from mldebug.files.procfs import thread_run_delay
from mldebug.files.rundir import RunPaths
from mldebug.files.safeio import json_number, read_json
from mldebug.model import (
    AgentState,
    CollectiveCall,
    CompileProgress,
    FlightGroup,
    GroupProgress,
    MemoryReading,
    RankTarget,
)
from mldebug.textsafe import printable

MAX_STATE_BYTES = 1 << 20
MAX_GROUPS = 64
MAX_TRACE = 64
MAX_HISTORY = 64
MAX_TEXT = 512  # an op, a group name, a call site
MAX_DIMS = 8
MAX_TENSORS = 16
MAX_INTERVAL = 3600.0  # a heartbeat interval beyond an hour is garbage
# What a heartbeat says of the CPU its threads waited for (docs/agent.md, `beat`)
BEAT_KEYS = ("tid", "run_delay", "main_run_delay", "step_main_run_delay", "threads")
MAX_BEAT_THREADS = 16  # the other threads' counts read (the agent writes as many at most)


def _int(value: object, low: int = 0, high: int = 1 << 62) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if low <= value <= high else None


def _text(value: object) -> str | None:
    return value[:MAX_TEXT] if isinstance(value, str) and value else None


def _shapes(value: object) -> tuple[tuple[int, ...], ...]:
    if not isinstance(value, list):
        return ()
    shapes = []
    for shape in value[:MAX_TENSORS]:
        if isinstance(shape, list) and len(shape) <= MAX_DIMS:
            dims = [d for d in map(_int, shape) if d is not None]
            if len(dims) == len(shape):
                shapes.append(tuple(dims))
    return tuple(shapes)


def _dtypes(value: object) -> tuple[str, ...]:
    if not isinstance(value, list):
        return ()
    return tuple(t for t in (_text(v) for v in value[:MAX_TENSORS]) if t)


def parse_call(data: object, group: str | None = None) -> CollectiveCall | None:
    """One call of `trace` (or a group's enqueued/completed entry, given its group)."""
    if not isinstance(data, dict):
        return None
    name = group or _text(data.get("group"))
    seq, op = _int(data.get("seq"), 1), _text(data.get("op"))
    if name is None or seq is None or op is None:
        return None
    return CollectiveCall(
        group=name,
        seq=seq,
        op=op,
        site=_text(data.get("site")),
        enqueued=parse_time(data.get("enqueued", data.get("time"))),
        completed=parse_time(data.get("completed")) if "enqueued" in data else None,
        asynchronous=data.get("async") is True,
        shapes=_shapes(data.get("shapes")),
        dtypes=_dtypes(data.get("dtypes")),
        error=_text(data.get("error")),
    )


def _completed(data: object, group: str) -> CollectiveCall | None:
    """A group's `completed` entry: its time is when it completed."""
    call = parse_call(data, group)
    if call is None or not isinstance(data, dict):
        return call
    when = parse_time(data.get("time"))
    return replace(call, enqueued=None, completed=when, shapes=(), dtypes=())


def _per_group(value: object) -> list[tuple[str, dict]]:
    """(group, entry) of a section keyed by group name: the first MAX_GROUPS, each name a
    text and each entry an object (the others are left out)."""
    if not isinstance(value, dict):
        return []
    named = ((_text(name), entry) for name, entry in list(value.items())[:MAX_GROUPS])
    return [
        (group, entry) for group, entry in named if group is not None and isinstance(entry, dict)
    ]


def _groups(value: object) -> tuple[GroupProgress, ...]:
    groups = []
    for group, entry in _per_group(value):
        groups.append(
            GroupProgress(
                group=group,
                size=_int(entry.get("size"), 1),
                enqueued=parse_call(entry.get("enqueued"), group),
                completed=_completed(entry.get("completed"), group),
            )
        )
    return tuple(groups)


def _flight(value: object) -> tuple[FlightGroup, ...]:
    """`flight_recorder`: per group torch's last recorded collective and its pending count."""
    groups = []
    for group, entry in _per_group(value):
        if not isinstance(entry.get("last"), dict):
            continue
        last = entry["last"]
        seq, op, pending = _int(last.get("seq")), _text(last.get("op")), _int(entry.get("pending"))
        retired = last.get("retired")
        if seq is None or op is None or pending is None or not isinstance(retired, bool):
            continue
        groups.append(
            FlightGroup(
                group=group,
                seq=seq,
                op=op,
                retired=retired,
                pending=pending,
                created=parse_time(last.get("created")),
                shapes=_shapes(last.get("sizes")),
                dtypes=_dtypes(last.get("dtypes")),
                ring=(_text(entry.get("ring")) or "")[:32],
                read=parse_time(entry.get("read")),
            )
        )
    return tuple(groups)


def _section(value: dict, name: str) -> dict:
    """value[name] where it is an object, else an empty one."""
    section = value.get(name)
    return section if isinstance(section, dict) else {}


def _memory(value: object) -> MemoryReading | None:
    if not isinstance(value, dict):
        return None
    cuda = _section(value, "cuda")
    nvml = _section(value, "nvml")
    return MemoryReading(
        rss=_int(value.get("rss")),
        cuda_allocated=_int(cuda.get("allocated")),
        cuda_reserved=_int(cuda.get("reserved")),
        cuda_max_allocated=_int(cuda.get("max_allocated")),
        cuda_max_reserved=_int(cuda.get("max_reserved")),
        cuda_num_ooms=_int(cuda.get("num_ooms")),
        cuda_alloc_retries=_int(cuda.get("num_alloc_retries")),
        cuda_inactive_split=_int(cuda.get("inactive_split")),
        nvml_used=_int(nvml.get("used")),
        nvml_total=_int(nvml.get("total")),
    )


def _history(value: object) -> tuple:
    if not isinstance(value, list):
        return ()
    rows = []
    for row in value[-MAX_HISTORY:]:
        if not isinstance(row, list) or len(row) != 4:
            continue
        when = parse_time(row[1])
        if when is None:
            continue
        rows.append((_int(row[0]), when, _int(row[2]), _int(row[3])))
    return tuple(rows)


def _interval(value: object) -> float | None:
    """Seconds between two heartbeats (MLDEBUG_HEARTBEAT), when the file gives them."""
    when = parse_time(value)
    return when if when is not None and 0.01 <= when <= MAX_INTERVAL else None


MAX_PHASE = 80  # characters of a compile phase kept


def parse_compile(data: object) -> CompileProgress | None:
    """state.json's `compile` section (agent/compiles.py), checked field by field."""
    if not isinstance(data, dict):
        return None
    count = _int(data.get("count"), 1, 1 << 31)
    if count is None:
        return None
    phase = data.get("phase")
    return CompileProgress(
        since=parse_time(data.get("since")),
        phase=" ".join(printable(phase[:MAX_PHASE]).split()) if isinstance(phase, str) else None,
        count=count,
        seconds=parse_time(data.get("seconds")) or 0.0,  # a number of seconds >= 0
        longest=parse_time(data.get("longest")) or 0.0,
        ended=parse_time(data.get("ended")),
    )


def parse_state(data: dict, rank: int) -> AgentState | None:
    """state.json's content, checked; None when it is not a state of this rank."""
    if not rules.is_state(data, rank):  # keys it does not know are ignored (an open schema)
        return None
    when = parse_time(data.get("time"))
    if when is None:
        return None
    trace = data.get("trace")
    calls = [parse_call(c) for c in trace[-MAX_TRACE:]] if isinstance(trace, list) else []
    census = parse_census(data.get("memory_census"))
    return AgentState(
        rank=rank,
        pid=_int(data.get("pid"), 1, 1 << 22),
        time=when,
        started=parse_time(data.get("started")),
        step=_int(data.get("step")),
        step_time=parse_time(data.get("step_time")),
        groups=_groups(data.get("groups")),
        trace=tuple(c for c in calls if c is not None),
        memory=_memory(data.get("memory")),
        memory_history=_history(data.get("memory_history")),
        interval=_interval(data.get("interval")),
        flight=_flight(data.get("flight_recorder")),
        timeline=parse_timeline(data.get("memory_timeline")),
        census=census[0],
        census_before=census[1],
        timing=parse_timing(data.get("timing")),  # collect/agenttiming.py
        compile=parse_compile(data.get("compile")),
        exiting=data.get("exiting") is True,
        waited_for_cpu=_waited_since_beat(data.get("beat")),
        step_waited_for_cpu=_step_waited(data.get("beat")),
    )


def read_state_file(run_dir: str | Path, rank: int) -> dict | None:
    """The rank's state.json as read (capped, no symlink): a state of this version and rank,
    its sections unchecked yet (parse_state checks them), or None."""
    data = read_json(RunPaths(Path(run_dir)).state_file(rank), MAX_STATE_BYTES)
    return data if rules.is_state(data, rank) else None


def read_state(run_dir: str | Path, rank: int) -> AgentState | None:
    """The rank's state.json, or None when there is none or it is not one."""
    data = read_state_file(run_dir, rank)
    return parse_state(data, rank) if data is not None else None


def _trusted(root: str) -> bool:
    """A run directory others may write into may hold planted states: not read."""
    try:
        return not os.stat(root).st_mode & 0o022
    except OSError:
        return False


def read_state_files(
    targets: Iterable[RankTarget], run_dir: str | None = None
) -> dict[int, tuple[int, dict]]:
    """pid -> (rank, its state.json as read) of each target that has one (a rank of an
    `mldebug run`, native or wrapped: its run directory is its own, else the job's). One
    capped read per target; whether the state is this process's (its pid) is for the
    analysis to check."""
    files: dict[int, tuple[int, dict]] = {}
    trusted: dict[str, bool] = {}
    for target in targets:
        root = target.run_dir or run_dir
        if root is None or target.rank is None or target.pid in files:
            continue
        if root not in trusted:
            trusted[root] = _trusted(root)
        if trusted[root]:
            data = read_state_file(root, target.rank)
            if data is not None:
                files[target.pid] = (target.rank, with_run_delay_now(data, target.pid))
    return files


def with_run_delay_now(data: dict, pid: int) -> dict:
    """The state with how long its heartbeat thread and its main thread have waited for a
    CPU so far, read now from /proc beside what the state said at its heartbeat (under
    "beat"): the difference tells a late heartbeat on a starved node from a frozen rank."""
    beat = data.get("beat")
    if not isinstance(beat, dict) or data.get("pid") != pid:
        return data
    tid = beat.get("tid")
    if not isinstance(tid, int) or isinstance(tid, bool):
        return data
    said = {k: beat[k] for k in BEAT_KEYS if k in beat}
    now = {
        "run_delay_now": thread_run_delay(pid, tid),
        "main_run_delay_now": thread_run_delay(pid, pid),
        "threads_waited_now": _others_waited(pid, beat.get("threads")),
    }
    return {**data, "beat": {**said, **{k: v for k, v in now.items() if v is not None}}}


def _others_waited(pid: int, threads: object) -> float | None:
    """The longest wait for a CPU since the heartbeat among the rank's other Python threads
    (the state's "beat"/"threads": [[tid, seconds so far], ...], MAX_BEAT_THREADS read). A
    thread's count grows only once it gets a CPU again: on a starved node the others run in
    turn and show how long the rank's threads wait, while the heartbeat's thread and the
    main thread may still be waiting, uncounted. None when not known."""
    if not isinstance(threads, list):
        return None
    longest = None
    for entry in threads[:MAX_BEAT_THREADS]:
        if not (isinstance(entry, list) and len(entry) == 2):
            continue
        tid, then = _int(entry[0], 1, 1 << 22), json_number(entry[1])
        if tid is None or then is None:
            continue
        now = thread_run_delay(pid, tid)
        if now is not None and now >= then:
            longest = max(longest or 0.0, now - then)
    return longest


def _step_waited(beat: object) -> float | None:
    """Seconds the rank's main thread has waited for a CPU since its step under way began,
    read now (else at its heartbeat). None when not known."""
    if not isinstance(beat, dict):
        return None
    start = json_number(beat.get("step_main_run_delay"))
    now = json_number(beat.get("main_run_delay_now"))
    now = now if now is not None else json_number(beat.get("main_run_delay"))
    if start is None or now is None or now < start:
        return None
    return now - start


def _waited_since_beat(beat: object) -> float | None:
    """Seconds the rank's heartbeat thread and its main thread waited for a CPU since its
    state was written, added: the heartbeat thread waits in the run queue, or for the GIL
    that a main thread waiting in the run queue holds. None when not known."""
    if not isinstance(beat, dict):
        return None
    waits = []
    for then, now in (("run_delay", "run_delay_now"), ("main_run_delay", "main_run_delay_now")):
        a, b = json_number(beat.get(then)), json_number(beat.get(now))
        if a is not None and b is not None and b >= a:
            waits.append(b - a)
    others = json_number(beat.get("threads_waited_now"))
    if others is not None and others >= 0:
        return max(sum(waits), others)
    return sum(waits) if waits else None


def states_of(files: Mapping[int, tuple[int, dict]]) -> dict[int, AgentState]:
    """pid -> the parsed state of each file read_state_files read (those that are states)."""
    states = {pid: parse_state(data, rank) for pid, (rank, data) in files.items()}
    return {pid: state for pid, state in states.items() if state is not None}


def read_states(targets: Iterable[RankTarget], run_dir: str | None = None) -> dict[int, AgentState]:
    """pid -> the state.json of each target that has one (read_state_files, parsed)."""
    return states_of(read_state_files(targets, run_dir))


class StateReader:
    """read_states for a view that asks at every poll: a state.json whose file is the one
    read last time (the same inode, modification time and size: the agent replaces the
    file at each write) is not read or parsed again. A view of 1,024 ranks whose agents
    beat less often than it polls reads only the files that changed."""

    def __init__(self) -> None:
        # (run dir, rank, pid) -> (the file's identity when read, what it read as)
        self._known: dict[tuple[str, int, int], tuple[tuple, AgentState | None]] = {}
        self._paths: dict[str, RunPaths] = {}  # run dir -> its paths, made once
        self.reads = 0  # files read and parsed (for the tests: unchanged ones are not)

    def _state_path(self, root: str, rank: int) -> Path:
        paths = self._paths.get(root)
        if paths is None:
            paths = self._paths[root] = RunPaths(Path(root))
        return paths.state_file(rank)

    def read(
        self, targets: Iterable[RankTarget], run_dir: str | None = None
    ) -> dict[int, AgentState]:
        known: dict[tuple[str, int, int], tuple[tuple, AgentState | None]] = {}
        states: dict[int, AgentState] = {}
        trusted: dict[str, bool] = {}
        for target in targets:
            root = target.run_dir or run_dir
            if root is None or target.rank is None or target.pid in states:
                continue
            if root not in trusted:
                trusted[root] = _trusted(root)
            if not trusted[root]:
                continue
            path = self._state_path(root, target.rank)
            try:
                info = os.lstat(path)
            except OSError:
                continue
            key = (root, target.rank, target.pid)
            identity = (info.st_dev, info.st_ino, info.st_mtime_ns, info.st_size)
            before = self._known.get(key)
            if before is not None and before[0] == identity:
                state = before[1]
            else:
                self.reads += 1
                # read_state_file's capped read, its path made once; parse_state checks it
                data = read_json(path, MAX_STATE_BYTES)
                state = parse_state(data, target.rank) if data is not None else None
            known[key] = (identity, state)
            if state is not None:
                states[target.pid] = state
        self._known = known  # only the targets of this poll
        return states
