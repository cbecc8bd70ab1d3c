"""The node document: what `mldebug collect` prints for one node, and how the front end
reads it back (docs/multi-node.md has the format).

It is already merged: each distinct set of thread stacks is written once (`stacks`), each
rank names its stack by index and adds its small facts (pid, state from its samples, CPU,
how its reading failed) and its agent's state.json as read (one writer, the agent; one
reader, collect.agentstate.parse_state; one version, ledger.rules.STATE_VERSION), and
`groups` are the node's merged classes (ranks with the same main-thread stack). A rank whose
process is gone is written (without a pid) only where the node's run recorded how it ended
(its exit code, or its Python's normal shut-down), so that the front end judges it as ended
as a local dump does, not as a rank with no process. Nothing is
judged across ranks here: the front end judges every node's ranks together. Thread ids are
left out, so that ranks with the same stacks share one entry.

A document comes from another machine's stdout: it is data. Reading checks every field's
type and size, and a document that is not one is a ValueError for its node, never a crash.
Identical frames and stacks of different nodes are read into one shared object (`Reader`),
so the front end holds each distinct stack once whatever the number of ranks.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from operator import itemgetter
from typing import TypeVar

from mldebug.analysis.snapshot import with_agent
from mldebug.collect.agentstate import parse_state
from mldebug.collect.crashes import recipe_id
from mldebug.collect.ras import read_carried
from mldebug.model import (
    FAIL_BUSY,
    FAIL_ERROR,
    FAIL_EXITED,
    FAIL_NOT_PYTHON,
    FAIL_PERMISSION,
    FAIL_TIMEOUT,
    STATE_EXITED,
    Frame,
    JobSnapshot,
    NodeReading,
    RankCrash,
    RankEvent,
    RankTarget,
    RankView,
    StackGroup,
    ThreadStack,
)
from mldebug.textsafe import one_line

FORMAT = "mldebug-node"
VERSION = 2  # 2: the ranks as read, before any verdict, with their state.json as read
MAX_RANKS = 4096  # per node
MAX_STACKS = 4096
MAX_THREADS = 256
MAX_DEPTH = 512
MAX_TEXT = 1024
MAX_NOTES = 32
MAX_EVENTS = 256
RAW_STACK_FRAMES = 1 << 20  # the frames of the stacks the front end remembers, as written
RAW_STACK_LIKE = 8  # stacks remembered that have the same threads of the same depths
STATES = ("running", "stuck", "exited", "unreadable", "missing", "unknown", "waiting")
FAILURES = (FAIL_EXITED, FAIL_PERMISSION, FAIL_TIMEOUT, FAIL_NOT_PYTHON, FAIL_ERROR, FAIL_BUSY)
MAX_HANG_AFTER = 86400.0
MAX_RANK = 1 << 20
_T = TypeVar("_T")
MAX_PID = 1 << 22


# ---- writing (on the node) ----


def _frame(frame: Frame) -> list:
    return [frame.function, frame.file, frame.line, 1 if frame.native else 0]


def _thread(thread: ThreadStack) -> dict:
    entry: dict[str, object] = {"name": thread.name, "frames": [_frame(f) for f in thread.frames]}
    if thread.active:
        entry["active"] = 1
    if thread.owns_gil:
        entry["gil"] = 1
    if thread.pid is not None:
        entry["pid"] = thread.pid
    return entry


def node_document(
    snapshot: JobSnapshot,
    host: str,
    notes: Sequence[str] = (),
    slurm_job: str | None = None,
    crashes: Sequence[RankCrash] = (),
    events: Sequence[RankEvent] = (),
    ras: dict | None = None,
    *,
    views: Sequence[RankView] | None = None,
    failures: Mapping[int, str] | None = None,
    agent_files: Mapping[int, dict] | None = None,
    hang_after: float | None = None,
) -> dict:
    """The node's document: its ranks as read (`views`: observe.pyspy.views_of, before any
    verdict; else the snapshot's), each with its agent's state.json as read (`agent_files`:
    pid -> the file's document, JobReadings.agent_files) and how its reading failed
    (`failures`), the snapshot's merged stack classes, how ranks ended badly and what their
    agents noticed. The front end judges them with every other node's (analysis.nodes);
    `hang_after`: the wait the run's --hang-timeout makes a hang (look.run_hang_after)."""
    views = snapshot.ranks if views is None else views
    failures = failures or {}
    agent_files = agent_files or {}
    stacks: list[list[dict]] = []
    index: dict[tuple, int] = {}

    def stack_of(threads: Sequence[ThreadStack]) -> int | None:
        if not threads:
            return None
        key = tuple(
            (t.name, t.active, t.owns_gil, t.pid, tuple(_key(f) for f in t.frames)) for t in threads
        )
        found = index.get(key)
        if found is None:
            found = index[key] = len(stacks)
            stacks.append([_thread(t) for t in threads])
        return found

    ranks = []
    for view in views:
        if view.target is None:
            if view.state == STATE_EXITED and (view.exit_code is not None or view.shut_down):
                ranks.append(_ended(view))  # the node's run recorded how it ended
            continue  # else a rank this node did not find is not this node's to report
        target = view.target
        entry = {
            "rank": view.rank,
            "pid": target.pid,
            "local_rank": target.local_rank,
            "world_size": target.world_size,
            "cmdline": target.cmdline[:MAX_TEXT],
            "state": view.state,
            "stack": stack_of(view.threads),
            "user_frame": _frame(view.user_frame) if view.user_frame else None,
            "collective": view.collective,
            "cpu_percent": view.cpu_percent,
            "rss_bytes": view.rss_bytes,
            "exit_code": view.exit_code,
            "detail": view.detail[:MAX_TEXT],
            "worker": view.dataloader_worker,
            "step": view.step,
            "heartbeat_age": view.heartbeat_age,
            "failure": failures.get(view.rank),
            # state.json as the node read it: one writer (the agent), one reader
            # (collect.agentstate.parse_state), one version (ledger.rules.STATE_VERSION)
            "agent": agent_files.get(target.pid) if view.agent is not None else None,
            "shut_down": 1 if view.shut_down else 0,
        }
        ranks.append(entry)
    by_rank = {entry["rank"]: entry["stack"] for entry in ranks}
    groups = [
        {"ranks": list(g.ranks), "stack": by_rank.get(g.ranks[0]), "state": g.state}
        for g in snapshot.groups
        if by_rank.get(g.ranks[0]) is not None
    ]
    return {
        "format": FORMAT,
        "version": VERSION,
        "host": host,
        "time": snapshot.time,
        "job": snapshot.job,
        "slurm_job": slurm_job,
        "world_size": snapshot.world_size,
        "hang_after": hang_after,
        "notes": list(notes)[:MAX_NOTES],
        "stacks": stacks,
        "groups": groups,
        "ranks": ranks,
        "crashes": [
            {
                "rank": c.rank,
                "time": c.time,
                "how": c.how,
                "exc_type": c.exc_type,
                "message": c.message[:MAX_TEXT],
                "location": c.location,
                "recipe": c.recipe,
            }
            for c in crashes[:MAX_RANKS]
        ],
        "events": [
            {
                "rank": e.rank,
                "time": e.time,
                "kind": e.kind,
                "message": e.message[:MAX_TEXT],
                "location": e.location,
                "step": e.step,
                "fields": [[k, v[:MAX_TEXT]] for k, v in e.fields],
            }
            for e in events[:MAX_EVENTS]
        ],
        "ras": ras,  # NCCL RAS's answer on this node (collect/ras.py carried), or None
    }


def _ended(view: RankView) -> dict:
    """A rank whose process is gone, as its node's run recorded its end (its exit code, or
    its Python's normal shut-down): without a pid, the rest as a rank entry says it."""
    return {
        "rank": view.rank,
        "pid": None,
        "local_rank": None,
        "world_size": None,
        "cmdline": "",
        "state": STATE_EXITED,
        "stack": None,
        "user_frame": None,
        "collective": None,
        "cpu_percent": None,
        "rss_bytes": None,
        "exit_code": view.exit_code,
        "detail": view.detail[:MAX_TEXT],
        "worker": None,
        "step": None,
        "heartbeat_age": None,
        "failure": None,
        "agent": None,
        "shut_down": 1 if view.shut_down else 0,
    }


def _key(frame: Frame) -> tuple:
    return (frame.function, frame.file, frame.line, frame.native)


# ---- reading (on the front end) ----


# The same short strings (function and file names, command lines, states) come in every
# node's document: cleaned once. Bounded, so that a hostile document cannot make it grow.
_CLEAN: dict[str, str] = {}
_CLEAN_MAX = 65536


def _text(value: object, default: str = "") -> str:
    if type(value) is not str:
        return one_line(value[:MAX_TEXT]) if isinstance(value, str) else default
    clean = _CLEAN.get(value)
    if clean is None:
        clean = one_line(value[:MAX_TEXT])
        if len(value) <= MAX_TEXT:
            if len(_CLEAN) >= _CLEAN_MAX:
                _CLEAN.clear()
            _CLEAN[value] = clean
    return clean


def _int(value: object, low: int = 0, high: int = 1 << 62) -> int | None:
    if value is None:  # the usual cases first: a fact not known, a plain int
        return None
    if type(value) is int:
        return value if low <= value <= high else None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        return None
    return value


def _number(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if 0 <= value < 1e15 else None


@contextmanager
def bulk_reading(lasting: bool = False) -> Iterator[None]:
    """Python's cycle collector paused while many documents are read and merged: what they
    make (frames, stacks, states) holds no cycles and is freed by reference counting, and
    the collector's full passes over a heap that grows by every node's ranks took half the
    reading time (benchmarks/bench_cluster_merge.py --agent-state). `lasting`: what was
    made lives until the process ends (a one-shot command): frozen (gc.freeze) before the
    collector resumes, whose first pass would walk every object made meanwhile (0.7 s at
    131,072 ranks, benchmarks/bench_commands.py --only front) and find no cycle."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if lasting:
            gc.freeze()
        if was:
            gc.enable()


class Reader:
    """Reads node documents; frames and stacks equal across nodes become one object."""

    def __init__(self) -> None:
        self.frames: dict[tuple, Frame] = {}
        self.stacks: dict[tuple, tuple[ThreadStack, ...]] = {}
        self.mains: dict[tuple, tuple[Frame, ...]] = {}
        # Stacks as their documents wrote them, by their threads' depths, with what they
        # read as: most nodes repeat the others' stacks, read once (bounded).
        self.raw_stacks: dict[tuple, list[tuple[list, tuple[ThreadStack, ...]]]] = {}
        self.raw_frames = 0
        # The last document's template (what its entry said, its view, its failure): the
        # next node's ranks mostly say the same too.
        self.template: tuple[tuple, RankView, object] | None = None
        self.last_stack: tuple[list, tuple[ThreadStack, ...]] = ([], ())

    def _frame(self, raw: object) -> Frame:
        if not isinstance(raw, list) or len(raw) != 4:
            raise ValueError("a frame is [function, file, line, native]")
        key = (_text(raw[0], "?"), _text(raw[1], "?"), _int(raw[2]), raw[3] == 1)
        frame = self.frames.get(key)
        if frame is None:
            frame = self.frames[key] = Frame(key[0], key[1], key[2], key[3])
        return frame

    def _frames(self, raw: object) -> tuple[Frame, ...]:
        if not isinstance(raw, list) or len(raw) > MAX_DEPTH:
            raise ValueError(f"frames: a list of at most {MAX_DEPTH}")
        frames = tuple(self._frame(f) for f in raw)
        return self.mains.setdefault(frames, frames)

    def _stack(self, raw: object) -> tuple[ThreadStack, ...]:
        if not isinstance(raw, list) or not 0 < len(raw) <= MAX_THREADS:
            raise ValueError(f"a stack is a list of 1 to {MAX_THREADS} threads")
        last, known = self.last_stack
        if raw == last:  # the usual case: the stack the node before wrote (see below)
            return known
        known = self._remembered(raw)
        self.last_stack = (raw, known)
        return known

    def _remembered(self, raw: list) -> tuple[ThreadStack, ...]:
        depths = tuple(_depth(t) for t in raw)
        alike = self.raw_stacks.setdefault(depths, [])
        for written, known in alike:
            # Compared as JSON values compare (a line 7.0 equals a line 7): a stack read
            # before was checked, so the comparison goes no deeper than a valid stack.
            if written == raw:
                return known
        known = self._new_stack(raw)
        frames = sum(depths)
        if self.raw_frames + frames > RAW_STACK_FRAMES:
            self.raw_stacks.clear()
            self.raw_frames = 0
            alike = self.raw_stacks.setdefault(depths, [])
        if len(alike) < RAW_STACK_LIKE:
            alike.append((raw, known))
            self.raw_frames += frames + 1
        return known

    def _new_stack(self, raw: list) -> tuple[ThreadStack, ...]:
        threads = []
        for number, entry in enumerate(raw):
            if not isinstance(entry, dict):
                raise ValueError("a thread is an object")
            threads.append(
                ThreadStack(
                    thread_id=number,
                    name=_text(entry.get("name")),
                    frames=self._frames(entry.get("frames")),
                    active=entry.get("active") == 1,
                    owns_gil=entry.get("gil") == 1,
                    pid=_int(entry.get("pid"), 1, 1 << 22),
                )
            )
        key = tuple(threads)
        return self.stacks.setdefault(key, key)

    def read(self, data: object, host: str) -> NodeReading:
        """One node's document as a NodeReading; `host` is the node as the front end
        knows it (what the document says of itself is not trusted for that)."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError("not an mldebug node document")
        if data.get("version") != VERSION:
            raise ValueError(
                f"node document version {data.get('version')!r}, this mldebug reads {VERSION}: "
                "install the same mldebug version on every node"
            )
        raw_stacks, raw_ranks = data.get("stacks"), data.get("ranks")
        if not isinstance(raw_stacks, list) or len(raw_stacks) > MAX_STACKS:
            raise ValueError(f"stacks: a list of at most {MAX_STACKS}")
        if not isinstance(raw_ranks, list) or len(raw_ranks) > MAX_RANKS:
            raise ValueError(f"ranks: a list of at most {MAX_RANKS}")
        stacks = [self._stack(s) for s in raw_stacks]
        now = _number(data.get("time")) or 0.0
        job = _text(data.get("job"))
        views, failures, seen = self._views(raw_ranks, stacks, host, job, now)
        groups = self._groups(data.get("groups"), stacks, seen)
        # Most nodes have no notes, crashes, events or RAS answer: nothing made for those.
        notes, crashes, events = data.get("notes"), data.get("crashes"), data.get("events")
        ras = data.get("ras")
        return NodeReading(
            host=host,
            time=now,
            views=tuple(views),
            groups=groups,
            world_size=_int(data.get("world_size"), 1, 1 << 20),
            job=job,
            notes=_notes(notes) if notes else (),
            crashes=tuple(_crashes(crashes)) if crashes else (),
            events=tuple(_events(events)) if events else (),
            ras=read_carried(ras, host) if ras is not None else None,
            failures=failures,
            hang_after=_hang_after(data.get("hang_after")),
        )

    def _views(
        self,
        raw_ranks: list,
        stacks: Sequence[tuple[ThreadStack, ...]],
        host: str,
        job: str,
        now: float,
    ) -> tuple[list[RankView], dict[int, str], set[int]]:
        """The node's ranks (each rank once, the first entry that names it), how their
        readings failed, and their numbers. A node's ranks mostly say the same but for
        their rank and pid (one stack, state, line and collective): an entry that says
        what the one before it said in every field the reader reads is that one's view
        renumbered, its rank and pid checked; only a rank that differs (or carries its
        agent's state.json) is read field by field."""
        views: list[RankView] = []
        failures: dict[int, str] = {}
        seen: set[int] = set()
        # The template: what its entry said in _SAID_FIELDS, its view and its failure.
        shape, template, said_failure = self._carried(stacks, host, job) or ((), None, None)
        for entry in raw_ranks:
            if not isinstance(entry, dict):
                continue
            same = False
            if template is not None:
                try:
                    same = _said_fields(entry) == shape
                except KeyError:  # a field left out: read field by field
                    pass
            if same and template is not None:
                view = _renumbered(template, entry.get("rank"), entry.get("pid"), entry)
                failure = said_failure
            else:
                view = self._view(entry, stacks, host, job, now)
                failure = entry.get("failure")
                if view is not None and view.target is not None and entry.get("agent") is None:
                    said = _said(entry)
                    if said is not None:
                        shape, template, said_failure = said, view, failure
            if view is None or view.rank in seen:
                continue
            seen.add(view.rank)
            views.append(view)
            if failure is not None and failure in FAILURES:
                failures[view.rank] = failure
        if template is not None:
            self.template = (shape, template, said_failure)
        return views, failures, seen

    def _carried(
        self, stacks: Sequence[tuple[ThreadStack, ...]], host: str, job: str
    ) -> tuple[tuple, RankView, object] | None:
        """The last document's template for this one: its view on this node, when its
        stack's number names the same stack here (stacks equal across nodes are one
        object); else None."""
        if self.template is None:
            return None
        shape, view, failure = self.template
        index = _int(shape[_STACK_FIELD], 0, len(stacks) - 1)
        if (stacks[index] if index is not None else ()) is not view.threads:
            return None
        if view.target is None:
            return None
        fields = view.target.__dict__.copy()
        fields["host"], fields["job"] = host, job
        target = _frozen(RankTarget, fields)
        fields = view.__dict__.copy()
        fields["target"] = target
        return shape, _frozen(RankView, fields), failure

    def _view(
        self,
        entry: object,
        stacks: Sequence[tuple[ThreadStack, ...]],
        host: str,
        job: str,
        now: float,
    ) -> RankView | None:
        if not isinstance(entry, dict):
            return None
        rank, pid = _int(entry.get("rank"), 0, MAX_RANK), _int(entry.get("pid"), 1, MAX_PID)
        state = entry.get("state")
        if rank is None or state not in STATES:
            return None
        if pid is None:
            return _ended_view(entry, rank, state)
        stack = _int(entry.get("stack"), 0, len(stacks) - 1)
        user = entry.get("user_frame")
        agent = entry.get("agent")
        view = RankView(
            rank=rank,
            target=RankTarget(
                pid=pid,
                rank=rank,
                world_size=_int(entry.get("world_size"), 1, 1 << 20),
                local_rank=_int(entry.get("local_rank"), 0, MAX_RANK),
                host=host,
                job=job,
                cmdline=_text(entry.get("cmdline")),
            ),
            state=state,
            threads=stacks[stack] if stack is not None else (),
            user_frame=self._frame(user) if isinstance(user, list) else None,
            collective=_text(entry.get("collective")) or None,
            cpu_percent=_number(entry.get("cpu_percent")),
            rss_bytes=_int(entry.get("rss_bytes")),
            exit_code=_int(entry.get("exit_code"), -(1 << 16), 1 << 16),
            detail=_text(entry.get("detail")),
            dataloader_worker=_int(entry.get("worker"), 1, 1 << 22),
            shut_down=_int(entry.get("shut_down"), 0, 1) == 1,
        )
        # The agent's state.json as the node read it, checked by the reader a local dump
        # uses and taken as a local dump takes it (its pid and rank; its age on the node's
        # own clock, the clock the agent wrote it by).
        agent_state = parse_state(agent, rank) if isinstance(agent, dict) else None
        return with_agent(view, agent_state, now)

    def _groups(
        self, raw: object, stacks: Sequence[tuple[ThreadStack, ...]], ranks: set[int]
    ) -> tuple[StackGroup, ...]:
        if not isinstance(raw, list):
            return ()
        groups = []
        for entry in raw[:MAX_STACKS]:
            if not isinstance(entry, dict) or not isinstance(entry.get("ranks"), list):
                continue
            stack = _int(entry.get("stack"), 0, len(stacks) - 1)
            listed = entry["ranks"][:MAX_RANKS]
            if set(map(type, listed)) == {int} and ranks.issuperset(listed):
                members = tuple(listed)  # the usual case, checked without a loop here
            else:
                members = tuple(r for r in listed if _int(r) in ranks)
            if stack is None or not members or not stacks[stack]:
                continue
            said = entry.get("state")
            state = said if isinstance(said, str) and said in STATES else "unknown"
            groups.append(StackGroup(ranks=members, frames=stacks[stack][0].frames, state=state))
        return tuple(groups)


def _ended_view(entry: dict, rank: int, state: object) -> RankView | None:
    """A rank entry without a pid: a rank its node's run recorded as ended (its exit code,
    or its Python shut down normally); any other entry without a pid is no rank."""
    code = _int(entry.get("exit_code"), -(1 << 16), 1 << 16)
    shut_down = code is None and _int(entry.get("shut_down"), 0, 1) == 1
    if state != STATE_EXITED or (code is None and not shut_down):
        return None
    return RankView(
        rank=rank,
        target=None,
        state=STATE_EXITED,
        exit_code=code,
        shut_down=shut_down,
        detail=_text(entry.get("detail")),
    )


def _depth(thread: object) -> int:
    frames = thread.get("frames") if isinstance(thread, dict) else None
    return len(frames) if isinstance(frames, list) else -1


# Every field of a rank entry the reader reads but its rank, pid and local rank: two entries
# equal in these make the same view but for those (JSON values compare as Python's do).
_SAID_FIELDS = (
    "state",
    "stack",
    "user_frame",
    "collective",
    "cpu_percent",
    "rss_bytes",
    "exit_code",
    "detail",
    "worker",
    "world_size",
    "cmdline",
    "failure",
    "agent",
    "shut_down",
)
_said_fields = itemgetter(*_SAID_FIELDS)
_STACK_FIELD = _SAID_FIELDS.index("stack")


def _said(entry: dict) -> tuple | None:
    """What a rank entry says in _SAID_FIELDS; None when it leaves one out."""
    try:
        return _said_fields(entry)
    except KeyError:
        return None


def _renumbered(template: RankView, rank: object, pid: object, entry: dict) -> RankView | None:
    """`template`'s view for another rank and pid of the same node, which said the same in
    all else: the two objects copied as they are (their other fields are checked already),
    at a tenth of building them anew."""
    # _int's checks, the usual case inline: this runs once a rank of the largest jobs
    rank = rank if type(rank) is int and 0 <= rank <= MAX_RANK else _int(rank, 0, MAX_RANK)
    pid = pid if type(pid) is int and 1 <= pid <= MAX_PID else _int(pid, 1, MAX_PID)
    if rank is None or pid is None or template.target is None:
        return None
    local_rank = entry.get("local_rank")
    if local_rank is not None and not (type(local_rank) is int and 0 <= local_rank <= MAX_RANK):
        local_rank = _int(local_rank, 0, MAX_RANK)
    fields = template.target.__dict__.copy()
    fields["pid"], fields["rank"], fields["local_rank"] = pid, rank, local_rank
    target = _NEW(RankTarget)  # _frozen's two steps, here without its call: once a rank
    _SET(target, "__dict__", fields)
    fields = template.__dict__.copy()
    fields["rank"], fields["target"] = rank, target
    view = _NEW(RankView)
    _SET(view, "__dict__", fields)
    return view


_NEW, _SET = object.__new__, object.__setattr__


def _frozen(cls: type[_T], fields: dict) -> _T:
    """An instance of the frozen dataclass `cls` with these fields (all of them, each
    checked): the quickest way to make one, once a rank at the largest jobs."""
    made = _NEW(cls)
    _SET(made, "__dict__", fields)
    return made


def _notes(value: object) -> tuple[str, ...]:
    notes = value[:MAX_NOTES] if isinstance(value, list) else []
    return tuple(_text(n) for n in notes if isinstance(n, str))


def _hang_after(value: object) -> float | None:
    seconds = _number(value)
    return seconds if seconds is not None and 0 < seconds <= MAX_HANG_AFTER else None


def _list(value: object, most: int) -> list[dict]:
    return [e for e in value[:most] if isinstance(e, dict)] if isinstance(value, list) else []


def _crashes(value: object) -> Iterator[RankCrash]:
    for entry in _list(value, MAX_RANKS):
        rank, when = _int(entry.get("rank"), 0, 1 << 20), _number(entry.get("time"))
        if rank is not None and when is not None:
            yield RankCrash(
                rank,
                when,
                _text(entry.get("how")),
                _text(entry.get("exc_type")),
                _text(entry.get("message")),
                _text(entry.get("location")) or None,
                recipe_id(entry.get("recipe")),
            )


def _events(value: object) -> Iterator[RankEvent]:
    for entry in _list(value, MAX_EVENTS):
        rank, kind = _int(entry.get("rank"), 0, 1 << 20), _text(entry.get("kind"))
        if rank is None or not kind:
            continue
        said = entry.get("fields")
        fields = said if isinstance(said, list) else []
        yield RankEvent(
            rank,
            _number(entry.get("time")),
            kind,
            _text(entry.get("message")),
            _text(entry.get("location")) or None,
            _int(entry.get("step")),
            tuple(
                (_text(f[0]), _text(f[1]))
                for f in fields[:32]
                if isinstance(f, list) and len(f) == 2
            ),
        )
