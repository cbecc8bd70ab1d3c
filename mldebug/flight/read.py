"""Reading a Flight Recorder dump: torch's pickle or its JSON form, never trusting either.

The pickle is read by an unpickler that refuses every global (`find_class`) and every
persistent id, so only the opcodes of plain containers and scalars work: nothing a file
holds is ever imported or called. The JSON is parsed with a depth check. Both are read
only up to MAX_BYTES, and every list is cut at a cap, so a hostile file costs bounded time.

gloo on torch 2.13 writes `pg_config` keyed '' with empty fields while its entries say
`('0', 'default_pg')` (torch's own analyser stops on it): the groups are then rebuilt from
the entries and `pg_status`, and the dump is marked `repaired`.
"""

from __future__ import annotations

import gc
import io
import json
import os
import pickle
import re
from collections.abc import Sequence
from typing import NoReturn

from mldebug.files.rundir import MAX_RANK
from mldebug.files.safeio import json_depth_ok, read_head
from mldebug.textsafe import one_line

from .columns import fast_entries
from .model import FORMAT_JSON, FORMAT_PICKLE, FlightDump, FlightEntry, FlightGroup
from .summary import tally_entries
from .table import first_of_groups

MAX_BYTES = 64 << 20  # 2,000 entries with stacks take about 2 MB; 20,000 about 20
MAX_ENTRIES = 100_000
MAX_GROUPS = 4096
MAX_DIMS = 16  # dimensions kept of one tensor's size
MAX_TENSORS = 64  # tensors kept of one entry's inputs or outputs
MAX_FRAMES = 64
MAX_TEXT = 200
MAX_JSON_DEPTH = 16
# Frames of torch itself and of mldebug's in-rank agent (its wrapper of each collective)
# are not where the user called the collective.
NOT_USER_PARTS = ("/torch/", "\\torch\\", "/mldebug/agent/", "/mldebug/hooks/")
_RANK_AT_END = re.compile(r"(\d+)(?:\.(?:json|pickle|pkl))?$")
# A host name in the file name (`fr_gpu-node12_rank_3`, `trace_rank_3_node12.json`): the
# number after the last "rank" wins over the number that ends the name.
_RANK_WORD = re.compile(r"rank[_\-.]?(\d+)", re.IGNORECASE)
_KEYS = (b"pg_config", b"entries", b"pg_status", b"comm_lib_version")


class FlightDumpError(Exception):
    """A file that is not a readable Flight Recorder dump; the message is one line."""


class _PlainUnpickler(pickle.Unpickler):
    """Plain containers and scalars only: a global (a class, a function) is refused."""

    def find_class(self, module: str, name: str) -> NoReturn:
        raise pickle.UnpicklingError(
            f"it asks for {one_line(str(module))[:80]}.{one_line(str(name))[:80]}, "
            "and only plain data is read"
        )

    def persistent_load(self, pid: object) -> NoReturn:
        raise pickle.UnpicklingError("it holds a persistent id, and only plain data is read")


def looks_like_flight_dump(path: str, head: bytes) -> bool:
    """Does a file starting with `head` look like a Flight Recorder dump (pickle or JSON)?
    Decided on the content, so any name works; `path` is not opened."""
    del path  # the content decides: torch's prefix is the user's choice
    if head[:1] == b"\x80" and b"version" in head[:512]:
        return any(key in head[:4096] for key in _KEYS)
    text = head.lstrip()[:4096]
    if text[:1] != b"{":
        return False
    return b'"version"' in text and any(b'"' + key + b'"' in text for key in _KEYS)


def rank_from_name(path: str) -> int | None:
    """The rank torch appends to the dump's prefix (`comm_lib_trace_rank_3` -> 3), also
    where a host name follows it (`trace_rank_3_node12` -> 3)."""
    name = os.path.basename(path)
    if name.startswith(".") or name.endswith(".tmp"):
        return None  # a dump being written (write-then-rename), not one
    words = _RANK_WORD.findall(name)
    match = _RANK_AT_END.search(name) if not words else None
    if words:
        text = words[-1]
        if len(text) > 7:
            return None
        return int(text) if int(text) < MAX_RANK else None
    if match is None or len(match.group(1)) > 7:
        return None
    rank = int(match.group(1))
    return rank if rank < MAX_RANK else None


def read_flight_dump(path: str) -> FlightDump:
    """One dump, checked and normalised. Raises FlightDumpError (one line) on bad input."""
    name = one_line(str(path))[:MAX_TEXT]
    try:
        data = read_head(path, MAX_BYTES + 1)
    except OSError as error:
        reason = one_line(error.strerror or str(error))
        raise FlightDumpError(f"{name}: cannot read it ({reason})") from None
    if len(data) > MAX_BYTES:
        raise FlightDumpError(f"{name}: over {MAX_BYTES >> 20} MiB, not read")
    # The unpickled dump is tens of thousands of containers, garbage a moment later: the
    # cyclic collector walking them again and again while the columns are pulled out cost
    # a fifth of the read. Paused meanwhile (bounded: one capped file), as it was after.
    collecting = gc.isenabled()
    gc.disable()
    try:
        raw, form = _decode(data, name)
        del data
        if not isinstance(raw, dict):
            raise FlightDumpError(f"{name}: not a Flight Recorder dump (no mapping at its top)")
        if "entries" not in raw and "pg_config" not in raw:
            raise FlightDumpError(f"{name}: not a Flight Recorder dump (no entries, no pg_config)")
        return _dump(str(path), form, raw)
    finally:
        if collecting:
            gc.enable()


def _decode(data: bytes, name: str) -> tuple[object, str]:
    if data.lstrip()[:1] != b"{":  # torch writes protocol 2; any protocol is read alike
        try:
            # Through a BufferedReader: the C unpickler then takes whole buffers (peek)
            # instead of a read call per opcode, four times faster on a BytesIO alone.
            stream = io.BufferedReader(io.BytesIO(data), 1 << 16)
            return _PlainUnpickler(stream).load(), FORMAT_PICKLE
        except RecursionError:
            raise FlightDumpError(f"{name}: its pickle nests too deep") from None
        except Exception as error:  # a broken pickle raises about anything; all mean "bad"
            text = one_line(str(error))[:160] or type(error).__name__
            raise FlightDumpError(
                f"{name}: not a readable Flight Recorder pickle ({text})"
            ) from None
    try:
        value = json.loads(data)
    except (ValueError, RecursionError) as error:
        text = one_line(str(error))[:160]
        raise FlightDumpError(
            f"{name}: neither a Flight Recorder pickle nor JSON ({text})"
        ) from None
    if not json_depth_ok(value, MAX_JSON_DEPTH):
        raise FlightDumpError(f"{name}: its JSON nests too deep for a Flight Recorder dump")
    return value, FORMAT_JSON


# The same few strings (ops, dtypes, states, file names) come back in every entry: cleaned
# once. Short strings only, and a bounded count, so a hostile file cannot make it grow.
_CLEAN: dict[str, str] = {}
_CLEAN_MAX = 16384
_USER_FILE: dict[str, bool] = {}


def _text(value: object) -> str:
    if type(value) is str:
        clean = _CLEAN.get(value)
        if clean is None:
            clean = one_line(value)[:MAX_TEXT]
            if len(value) <= 1024:
                if len(_CLEAN) >= _CLEAN_MAX:
                    _CLEAN.clear()
                _CLEAN[value] = clean
        return clean
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        return ""
    if isinstance(value, int) and not -(1 << 63) < value < 1 << 63:
        return ""  # str() of a huge int is slow, and refused past 4,300 digits
    return one_line(str(value))[:MAX_TEXT]


def _user_file(filename: str) -> bool:
    known = _USER_FILE.get(filename)
    if known is None:
        known = bool(filename) and not any(part in filename for part in NOT_USER_PARTS)
        if len(_USER_FILE) >= _CLEAN_MAX:
            _USER_FILE.clear()
        _USER_FILE[filename] = known
    return known


def int64_of(value: object) -> int | None:
    """An int within int64, also from a decimal string ("-1", as JSON forms write some);
    None for anything else (true, a float, a string that is no number)."""
    if type(value) is int:  # the usual case first
        return value if -(1 << 63) < value < 1 << 63 else None
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if abs(value) < 1 << 63 else None
    if isinstance(value, str) and 0 < len(value) < 20:
        try:
            return int(value)
        except ValueError:
            return None
    return None


def _sizes(value: object) -> tuple[tuple[int, ...], ...]:
    if not isinstance(value, (list, tuple)):
        return ()
    out = []
    for shape in value[:MAX_TENSORS]:
        if isinstance(shape, (list, tuple)):
            out.append(tuple(d for d in (int64_of(x) for x in shape[:MAX_DIMS]) if d is not None))
    return tuple(out)


def _texts(value: object) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)):
        return ()
    return tuple(_text(v) for v in value[:MAX_TENSORS])


def _location(frames: object) -> str | None:
    """file:line of the innermost recorded frame outside torch and mldebug (the user's call)."""
    if not isinstance(frames, (list, tuple)):
        return None
    for frame in frames[:MAX_FRAMES]:
        if not isinstance(frame, dict):
            continue
        # Equal frames (==) must read alike: the column reader compares stacks by value.
        name = frame.get("filename")
        filename = _text(name) if type(name) is str else ""
        if _user_file(filename):
            line = _line(frame.get("line"))
            return f"{filename}:{line}" if line is not None else filename
    return None


def _line(value: object) -> int | None:
    """A frame's line; the same for values equal by == (True, 1 and 1.0 alike)."""
    if isinstance(value, float):
        return int(value) if value.is_integer() and abs(value) < 1 << 63 else None
    return int64_of(int(value)) if isinstance(value, int) else None


def _ranks(value: object) -> tuple[int, ...] | None:
    """pg_config's ranks: "[0, 1]" in torch's dumps (a list in some), or None."""
    if isinstance(value, str):
        text = value.strip()
        if not (text.startswith("[") and text.endswith("]")) or len(text) > 1 << 20:
            return None
        value = [part for part in text[1:-1].split(",") if part.strip()]
    if not isinstance(value, (list, tuple)):
        return None
    ranks = [int64_of(v.strip() if isinstance(v, str) else v) for v in value[:MAX_RANK]]
    if not ranks or any(r is None or not 0 <= r < MAX_RANK for r in ranks):
        return None
    return tuple(r for r in ranks if r is not None)


def _status(raw: dict) -> dict[str, dict]:
    status = raw.get("pg_status")
    if not isinstance(status, dict):
        return {}
    return {
        _text(key): value
        for key, value in list(status.items())[:MAX_GROUPS]
        if isinstance(value, dict) and _text(key)
    }


def _done(status: dict[str, dict], pg_id: int | None, known: dict) -> int | None:
    """The group's last completed collective by pg_status (its keys are group ids)."""
    known[pg_id] = int64_of(status.get(str(pg_id), {}).get("last_completed_collective"))
    return known[pg_id]


# What most entries of a ring share (group, op, sizes, dtypes, the caller's line) is
# normalised once per distinct value and looked up after: a bounded cache keyed by the raw
# values (as tuples). Equal raw values read alike; anything not plain takes the slow path.
_SHAPES: dict[tuple, tuple] = {}
_SHAPES_MAX = 65536
_LOCATIONS: dict[tuple, str | None] = {}


def _frames_key(frames: object) -> tuple | None:
    """(filename, line) of the frames up to the first user frame: what _location reads."""
    if type(frames) is not list:
        return None
    key = []
    for frame in frames[:MAX_FRAMES]:
        if type(frame) is not dict:
            return None
        filename, line = frame.get("filename"), frame.get("line")
        if type(filename) is not str or (line is not None and type(line) is not int):
            return None
        key.append((filename, line))
        user = _USER_FILE.get(filename)
        if user is None:
            return None  # not seen yet: the slow path learns it
        if user:
            break
    return tuple(key)


def _location_of(frames: object) -> str | None:
    key = _frames_key(frames)
    if key is None:
        return _location(frames)
    hit = _LOCATIONS.get(key, _LOCATIONS)
    if hit is _LOCATIONS:
        hit = _location(frames)
        if len(_LOCATIONS) >= _SHAPES_MAX:
            _LOCATIONS.clear()
        _LOCATIONS[key] = hit
    return hit  # type: ignore[return-value]


def _shape(raw: dict) -> tuple | None:
    """(group, desc, backend, op, input sizes, output sizes, input dtypes, output dtypes,
    location) of an entry, or None when it names no group."""
    get = raw.get
    pg = get("process_group")
    isz, osz = get("input_sizes"), get("output_sizes")
    idt, odt = get("input_dtypes"), get("output_dtypes")
    name = get("profiling_name")
    # reprs: of plain data they are equal only for equal values (True and 1 differ)
    small = all(type(v) is list and len(v) <= MAX_TENSORS for v in (isz, osz, idt, odt))
    key = (repr(pg), repr(name), repr(isz), repr(osz), repr(idt), repr(odt)) if small else None
    hit = _SHAPES.get(key) if key is not None and len(key[0]) + len(key[1]) < 512 else None
    if hit is not None:
        return hit[:-1] + (_location_of(get("frames")),)
    if isinstance(pg, (list, tuple)) and len(pg) == 2:
        group, desc = _text(pg[0]), _text(pg[1])
    elif isinstance(pg, (str, int)) and not isinstance(pg, bool):
        group, desc = _text(pg), ""  # a bare name: no description recorded
    else:
        return None
    if not group:
        return None
    backend, _, op = _text(name).rpartition(":")
    shape = (
        group,
        desc,
        backend,
        op or "?",
        _sizes(isz),
        _sizes(osz),
        _texts(idt),
        _texts(odt),
        None,
    )
    if key is not None and sum(map(len, key)) < 4096:
        if len(_SHAPES) >= _SHAPES_MAX:
            _SHAPES.clear()
        _SHAPES[key] = shape
    return shape[:-1] + (_location_of(get("frames")),)


def _entry(raw: object, status: dict[str, dict], status_done: dict) -> FlightEntry | None:
    if type(raw) is not dict:
        return None
    shape = _shape(raw)
    if shape is None:
        return None
    group, desc, backend, op, isz, osz, idt, odt, location = shape
    get = raw.get
    p2p = get("is_p2p") is True
    seq = int64_of(get("p2p_seq_id" if p2p else "collective_seq_id"))
    if seq is None:
        return None
    state = get("state")
    state = state if type(state) is str and state in _STATES else _text(state)
    retired = get("retired") is True
    pg_id = int64_of(get("pg_id"))
    done = status_done[pg_id] if pg_id in status_done else _done(status, pg_id, status_done)
    created = int64_of(get("time_created_ns"))
    return FlightEntry(
        group,
        desc,
        pg_id,
        seq,
        p2p,
        op,
        backend,
        isz,
        osz,
        idt,
        odt,
        state,
        retired,
        state == "completed" or retired or (not p2p and done is not None and seq <= done),
        created / 1e9 if created else None,
        int64_of(get("timeout_ms")),
        location,
        int64_of(get("record_id")),
        _duration(get("duration_ms")),
    )


_STATES = {"scheduled": "scheduled", "started": "started", "completed": "completed"}


def _duration(value: object) -> float | None:
    """duration_ms (a float, timing on) in seconds; None when absent or not a duration."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value / 1000 if 0 <= value < 7 * 86400 * 1000 else None


def _groups(
    raw: dict, entries: Sequence[FlightEntry], status: dict[str, dict]
) -> tuple[list[FlightGroup], bool]:
    """The dump's groups, and whether they had to be rebuilt from its entries."""
    config = raw.get("pg_config")
    groups: dict[str, FlightGroup] = {}
    if isinstance(config, dict):
        for key, value in list(config.items())[:MAX_GROUPS]:
            if not isinstance(value, dict):
                continue
            name = _text(value.get("name")) or _text(key)
            if name:
                groups[name] = FlightGroup(
                    name, _text(value.get("desc")), _ranks(value.get("ranks"))
                )
    # The gloo quirk: entries of groups pg_config does not name (it holds only '').
    ids = first_of_groups(entries)
    missing = [name for name in ids if name not in groups]
    for name in missing:
        groups[name] = FlightGroup(name, ids[name][1], None)
    out = []
    for name, group in groups.items():
        pg_id = ids[name][0] if name in ids else None
        state = status.get(str(pg_id) if pg_id is not None else name, {})
        out.append(
            FlightGroup(
                group.name,
                group.desc,
                group.ranks,
                last_enqueued=int64_of(state.get("last_enqueued_collective")),
                last_started=int64_of(state.get("last_started_collective")),
                last_completed=int64_of(state.get("last_completed_collective")),
            )
        )
    return out, bool(missing)


def _dump(path: str, form: str, raw: dict) -> FlightDump:
    status = _status(raw)
    items = raw.get("entries")
    items = items if isinstance(items, (list, tuple)) else []
    total = len(items)
    done: dict = {}
    ring = list(items[:MAX_ENTRIES])
    entries: Sequence[FlightEntry] | None
    entries = fast_entries(ring, _shape, _location_of, lambda pg: _done(status, pg, done))
    if entries is None:  # not plain enough for the columns: entry by entry, each checked
        entries = tuple(e for e in (_entry(item, status, done) for item in ring) if e)
    del ring, items  # the unpickled objects go as soon as their columns are out
    groups, repaired = _groups(raw, entries, status)
    rank = rank_from_name(path)
    if rank is None:  # a world of one says who it is
        world = next((g.ranks for g in groups if g.desc == "default_pg"), None)
        rank = world[0] if world is not None and len(world) == 1 else None
    if rank is not None:
        # pg_config names subgroups this rank is not in (torch records every new_group
        # call): a group whose ranks leave this rank out, with no entry of it, is not its own.
        used = set(first_of_groups(entries))
        groups = [g for g in groups if g.ranks is None or rank in g.ranks or g.name in used]
    return FlightDump(
        path=path,
        rank=rank,
        format=form,
        version=_text(raw.get("version")),
        # `nccl_version` until format 2.7, `comm_lib_version` since
        comm_lib_version=_text(raw.get("comm_lib_version") or raw.get("nccl_version")),
        groups=tuple(groups),
        entries=entries,
        repaired=repaired,
        dropped=total - len(entries),
        tally=tally_entries(entries),  # the summary's counts, here (in the worker) and once
    )
