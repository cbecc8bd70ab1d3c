"""Reading what NCCL's RAS answers (`ncclras`, `ncclras -f json`), saved or asked live.

Formats, from NCCL's `src/ras/client_support.cc` (2.24 to 2.30; 2.31-2.32 documented alike):
  * text: `NCCL version X compiled with CUDA Y`, `CUDA runtime version R, driver version D`,
    `Job summary`, `Communicators... (0.00s)` with its table (group, comms, nodes, ranks per
    node/comm/group, status, errors), then `Errors` (INCOMPLETE, DEAD, `#G-I (hash) ERROR`)
    and `Warnings` (TIMEOUT, `#G-I (hash) MISMATCH`: "Communicator ranks have different
    AllGather operation counts", "N ranks have launched up to operation M", the outlier
    ranks "Rank R -- GPU G managed by process P on node H"). 2.24-2.25 keep one count for all
    collective types ("different collective operation counts").
  * JSON (2.28.7+, `SET FORMAT json`): `nccl_version`, `cuda_runtime_version`,
    `cuda_driver_version`, `communicators` (hash, size, ranks with host, pid, cuda_dev,
    status, collective_counts; missing_ranks), `ras` (collection time, timeouts). 2.28.7 to
    2.28.9 print no comma after a missing rank's `nvml_dev`: it is put back.
Everything is data: capped, one line per field, never trusted.
"""

from __future__ import annotations

import json
import re
from collections import Counter

from mldebug.files.rundir import MAX_RANK
from mldebug.files.safeio import json_depth_ok, read_head
from mldebug.flight.read import int64_of as _int
from mldebug.nccl.logformats import VERSION
from mldebug.textsafe import one_line

from .model import (
    ALL_OPS,
    FORMAT_JSON,
    FORMAT_TEXT,
    RasComm,
    RasCountGroup,
    RasRank,
    RasReport,
)

MAX_BYTES = 64 << 20  # 100k ranks of JSON take about 40 MB
MAX_LINE = 4096
MAX_COMMS = 4096
MAX_RANKS = 1 << 17  # ranks kept of one communicator
MAX_TEXT = 120
_STATUSES = ("NOCOMM", "INIT", "RUNNING", "FINALIZE", "ABORT")

_TEXT_HEAD = re.compile(rb"\s*NCCL version \S+ compiled with CUDA")
_CUDA = re.compile(r"^CUDA runtime version (\d+), driver version (\d+)")
_TABLE_ROW = re.compile(
    r"^\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+(?:-\d+)?)\s+(\d+)\s+(\d+)\s+([A-Z]+)\s+([A-Z,]+)\s*$"
)
_COMM = re.compile(r"^#(\d+)-(\d+) \(([0-9a-fA-F]+)\) ([A-Z]+)")
_DIFFERENT_COUNTS = re.compile(r"^\s+Communicator ranks have different (\w+) operation counts")
# "launched up to operation N" or "not launched any operations" (N = 0), by a group of
# ranks or by one rank (then where it runs)
_LAUNCHED = r"(?:launched up to operation (\d+)|not launched any operations)"
_GROUP_LAUNCHED = re.compile(r"^\s+(\d+) ranks have " + _LAUNCHED)
_ONE_LAUNCHED = re.compile(r"^\s+Rank (\d+) has " + _LAUNCHED + r"(?: -- (.*))?")
_GROUP_STATUS = re.compile(r"^\s+(\d+) ranks have status (\w+)")
_ONE_STATUS = re.compile(r"^\s+Rank (\d+) has status (\w+)(?: -- (.*))?")
_RANK = re.compile(r"^\s+Rank (\d+) -- (.*)")
_WHERE = re.compile(r"GPU (\d+)(?: \(NVML \d+\))? managed by process (\d+) on node (\S+)")
_PROCESS = re.compile(r"^\s+Process (\d+) on node (\S+) managing GPU")
_MISSING_PROCS = re.compile(r"^\s+Missing communicator data from (\d+) job process")
_DEAD_PROCS = re.compile(r"^\s+(\d+) job process(?:es are| is) considered dead")
_TIMEOUTS = re.compile(r"^\s+Encountered (\d+) communication timeout")
_NO_COMMA = re.compile(rb'("nvml_dev": -?\d+)(\s*\n\s*"status")')


class RasError(Exception):
    """Not a readable RAS answer; the message is one line."""


def looks_like_ras(head: bytes) -> bool:
    """Does a file (or an answer) starting with `head` look like RAS output, text or JSON?"""
    if _TEXT_HEAD.match(head):
        return True
    text = head.lstrip()[:4096]
    return text[:1] == b"{" and b'"nccl_version"' in text and b'"communicators' in text


def read_ras_file(path: str) -> RasReport:
    name = one_line(str(path))[:200]
    try:
        data = read_head(path, MAX_BYTES + 1)
    except OSError as error:
        raise RasError(
            f"{name}: cannot read it ({one_line(error.strerror or str(error))})"
        ) from None
    if len(data) > MAX_BYTES:
        raise RasError(f"{name}: over {MAX_BYTES >> 20} MiB, not read as a RAS answer")
    return parse_ras(data, str(path))


def parse_ras(data: bytes, where: str) -> RasReport:
    """A RAS answer, text or JSON. Raises RasError (one line) when it is neither."""
    if data.lstrip()[:1] == b"{":
        return _from_json(data, where)
    if not _TEXT_HEAD.match(data):
        raise RasError(f"{one_line(where)[:200]}: not a RAS answer (no `NCCL version` line)")
    return _from_text(data.decode("utf-8", "replace"), where)


def _clean(value: object) -> str:
    return one_line(str(value))[:MAX_TEXT] if isinstance(value, (str, int)) else ""


# ---- JSON ----


def _from_json(data: bytes, where: str) -> RasReport:
    name = one_line(where)[:200]
    repaired = ""
    try:
        raw = json.loads(data)
    except (ValueError, RecursionError):
        mended = _NO_COMMA.sub(rb"\1,\2", data)
        try:
            raw = json.loads(mended)
        except (ValueError, RecursionError) as error:
            raise RasError(
                f"{name}: not readable RAS JSON ({one_line(str(error))[:120]})"
            ) from None
        repaired = "the comma NCCL 2.28.7-2.28.9 leave out in missing_ranks put back"
    if not isinstance(raw, dict) or not json_depth_ok(raw, 12):
        raise RasError(f"{name}: not RAS JSON (no object at its top, or nested too deep)")
    comms, dropped = [], 0
    items = raw.get("communicators")
    for index, item in enumerate(items[:MAX_COMMS] if isinstance(items, list) else []):
        comm = _json_comm(index, item)
        if comm is None:
            dropped += 1
        else:
            comms.append(comm)
    dead = tuple((r.pid, r.host) for c in comms for r in c.missing if r.dead)
    ras = raw.get("ras")
    ras = ras if isinstance(ras, dict) else {}
    return RasReport(
        path=where,
        format=FORMAT_JSON,
        nccl_version=_clean(raw.get("nccl_version")),
        cuda_runtime=_int(raw.get("cuda_runtime_version")),
        cuda_driver=_int(raw.get("cuda_driver_version")),
        comms=tuple(comms),
        dead=tuple(dict.fromkeys(dead)),
        timeouts=_int(ras.get("timeouts_count")) or 0,
        repaired=repaired,
        dropped=dropped,
    )


def _json_status(status: object) -> str:
    """NCCL's own order: aborted, finalizing or destroyed, initialised, still initialising."""
    if not isinstance(status, dict):
        return ""
    if status.get("abort_flag") is True:
        return "ABORT"
    if status.get("finalize_called") is True or status.get("destroy_flag") is True:
        return "FINALIZE"
    return "RUNNING" if _int(status.get("init_state")) == 0 else "INIT"


def _json_errors(status: object) -> bool:
    if not isinstance(status, dict):
        return False
    # ncclSuccess (0) and ncclInProgress (7) are not errors
    return any(_int(status.get(k)) not in (0, 7, None) for k in ("init_state", "async_error"))


def _json_rank(item: object, missing: bool) -> RasRank | None:
    if not isinstance(item, dict):
        return None
    rank = _int(item.get("rank"))
    if rank is None or not 0 <= rank < MAX_RANK:
        return None
    counts = item.get("collective_counts")
    pairs = tuple(
        (_clean(op), number)
        for op, raw in (list(counts.items())[:32] if isinstance(counts, dict) else [])
        if (number := _int(raw)) is not None and _clean(op)
    )
    status = item.get("status")
    pid = _int(item.get("pid"))
    host = _clean(item.get("host"))
    return RasRank(
        rank=rank,
        host="" if host == "unknown" else host,
        pid=pid if pid is not None and pid > 0 else None,
        cuda_dev=_int(item.get("cuda_dev")),
        counts=pairs,
        status="" if missing else _json_status(status),
        missing=missing,
        dead=missing and isinstance(status, dict) and status.get("considered_dead") is True,
    )


def _json_comm(index: int, item: object) -> RasComm | None:
    if not isinstance(item, dict):
        return None
    found = item.get("ranks")
    lost = item.get("missing_ranks")
    ranks = [r for r in (_json_rank(x, False) for x in _list(found)) if r]
    missing = [r for r in (_json_rank(x, True) for x in _list(lost)) if r]
    statuses = Counter(r.status for r in ranks if r.status)
    groups = _count_groups(ranks)
    errors = [
        word
        for word, present in (
            ("INCOMPLETE", bool(missing)),
            (
                "ERROR",
                any(_json_errors(x.get("status")) for x in _list(found) if isinstance(x, dict)),
            ),
            ("MISMATCH", bool(groups) or len(statuses) > 1),
        )
        if present
    ]
    return RasComm(
        label=f"#{index}",
        hash=_clean(item.get("hash")),
        size=_int(item.get("size")),
        status=statuses.most_common(1)[0][0] if statuses else "",
        errors=",".join(errors) or "OK",
        ranks=tuple(ranks),
        missing=tuple(missing),
        count_groups=groups,
        complete=True,
    )


def _list(value: object) -> list:
    return value[:MAX_RANKS] if isinstance(value, list) else []


def _count_groups(ranks: list[RasRank]) -> tuple[RasCountGroup, ...]:
    """Per op whose counts differ between ranks: the ranks at each count, biggest group first."""
    ops: dict[str, dict[int, list[int]]] = {}
    for rank in ranks:
        for op, value in rank.counts:
            ops.setdefault(op, {}).setdefault(value, []).append(rank.rank)
    out = []
    for op, by_value in ops.items():
        if len(by_value) < 2:
            continue
        for value, members in sorted(by_value.items(), key=lambda kv: (-len(kv[1]), -kv[0])):
            out.append(RasCountGroup(op, value, len(members), tuple(sorted(members))))
    return tuple(out)


# ---- text ----


class _Comm:
    """A communicator being read from the text form."""

    def __init__(self, label: str, hash_: str = "") -> None:
        self.label, self.hash = label, hash_
        self.size: int | None = None
        self.status = self.errors = self.last_status = ""
        self.ranks: dict[int, dict] = {}
        self.missing: set[int] = set()
        self.groups: list[list] = []  # [op, launched, count, listed]

    def rank(self, number: int, where: str | None) -> dict:
        fields = self.ranks.setdefault(number, {"counts": {}})
        match = _WHERE.search(where or "")
        if match:
            fields.update(
                cuda_dev=int(match.group(1)),
                pid=int(match.group(2)),
                host=match.group(3)[:MAX_TEXT],
            )
        return fields

    def freeze(self) -> RasComm:
        ranks = tuple(
            RasRank(
                rank=n,
                host=one_line(f.get("host", "")),
                pid=f.get("pid"),
                cuda_dev=f.get("cuda_dev"),
                counts=tuple(f["counts"].items()),
                status=f.get("status", "") or ("" if n in self.missing else self.status),
                missing=n in self.missing,
            )
            for n, f in sorted(self.ranks.items())
        )
        groups = tuple(
            RasCountGroup(op, launched, count, tuple(sorted(listed)))
            for op, launched, count, listed in self.groups
        )
        return RasComm(
            label=self.label,
            hash=self.hash,
            size=self.size,
            status=self.status,
            errors=self.errors or "OK",
            ranks=tuple(r for r in ranks if not r.missing),
            missing=tuple(r for r in ranks if r.missing),
            count_groups=groups,
            complete=False,
        )


def _from_text(text: str, where: str) -> RasReport:
    version, runtime, driver = "", None, None
    comms: dict[str, _Comm] = {}
    table: dict[int, tuple] = {}
    dead: list[tuple[int | None, str]] = []
    missing_procs = timeouts = dropped = 0
    section = ""  # the unindented heading the lines belong to
    comm: _Comm | None = None
    context = ""  # within a communicator: "counts", "status" or "missing"
    op = ""
    for line in text.splitlines():
        if len(line) > MAX_LINE:
            dropped += 1
            continue
        if line and not line[0].isspace():
            match = _COMM.match(line)
            if match:
                label = f"#{match.group(1)}-{match.group(2)}"
                if label not in comms and len(comms) >= MAX_COMMS:
                    comm = None
                    continue
                comm = comms.setdefault(label, _Comm(label))
                comm.hash = match.group(3).lower()
                section, context = match.group(4), ""
                if section == "INCOMPLETE":
                    context = "missing"
                continue
            comm, section = None, line.strip()
            if line.startswith("NCCL version ") and (match := VERSION.match(line)):
                version = match.group("v")  # NCCL's version line, read as in its logs
            elif match := _CUDA.match(line):
                runtime, driver = int(match.group(1)), int(match.group(2))
            continue
        if comm is None:
            if match := _TABLE_ROW.match(line):
                group = int(match.group(1))
                table[group] = (
                    int(match.group(2)),
                    int(match.group(5)),
                    match.group(7),
                    match.group(8),
                )
            elif section == "INCOMPLETE" and (match := _MISSING_PROCS.match(line)):
                missing_procs = int(match.group(1))
            elif section == "DEAD" and (match := _PROCESS.match(line)):
                dead.append((int(match.group(1)), match.group(2)[:MAX_TEXT]))
            elif section == "TIMEOUT" and (match := _TIMEOUTS.match(line)):
                timeouts = int(match.group(1))
            continue
        _comm_line(comm, line, context, op)
        if match := _DIFFERENT_COUNTS.match(line):
            op = match.group(1)
            op = ALL_OPS if op == "collective" else op
            context = "counts"
        elif "Communicator ranks have different status" in line:
            context = "status"
    for group, (count, size, status, errors) in sorted(table.items()):
        for index in range(min(count, MAX_COMMS)):
            label = f"#{group}-{index}"
            if label not in comms and len(comms) >= MAX_COMMS:
                break
            entry = comms.setdefault(label, _Comm(label))
            entry.size, entry.status, entry.errors = size, status, errors
    ordered = sorted(comms.values(), key=lambda c: tuple(int(x) for x in c.label[1:].split("-")))
    return RasReport(
        path=where,
        format=FORMAT_TEXT,
        nccl_version=version,
        cuda_runtime=runtime,
        cuda_driver=driver,
        comms=tuple(c.freeze() for c in ordered),
        dead=tuple(dead[:MAX_RANKS]),
        missing_processes=missing_procs,
        timeouts=timeouts,
        dropped=dropped,
    )


def _comm_line(comm: _Comm, line: str, context: str, op: str) -> None:
    """One indented line of a `#G-I` section."""
    if context == "counts":
        if match := _GROUP_LAUNCHED.match(line):
            launched = int(match.group(2) or 0)
            comm.groups.append([op, launched, int(match.group(1)), []])
            return
        if one := _ONE_LAUNCHED.match(line):
            launched = int(one.group(2) or 0)
            rank = int(one.group(1))
            if rank < MAX_RANK:
                comm.rank(rank, one.group(3))["counts"][op] = launched
                comm.groups.append([op, launched, 1, [rank]])
            return
        match = _RANK.match(line)
        if match and comm.groups and int(match.group(1)) < MAX_RANK:
            group = comm.groups[-1]
            rank = int(match.group(1))
            comm.rank(rank, match.group(2))["counts"][op] = group[1]
            if len(group[3]) < MAX_RANKS:
                group[3].append(rank)
        return
    if context == "status":
        if match := _GROUP_STATUS.match(line):
            comm.last_status = match.group(2) if match.group(2) in _STATUSES else ""
        elif match := _ONE_STATUS.match(line):
            if int(match.group(1)) < MAX_RANK and match.group(2) in _STATUSES:
                comm.rank(int(match.group(1)), match.group(3))["status"] = match.group(2)
        elif (match := _RANK.match(line)) and comm.last_status and int(match.group(1)) < MAX_RANK:
            comm.rank(int(match.group(1)), match.group(2))["status"] = comm.last_status
        return
    if context == "missing" and (match := _RANK.match(line)):
        rank = int(match.group(1))
        if rank < MAX_RANK:
            comm.rank(rank, match.group(2))
            comm.missing.add(rank)
