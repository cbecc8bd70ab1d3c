"""`mldebug check`'s results, read back from what the ranks printed (preflight/wire.py).

`results_of(lines, ...)` is pure: lines of any origin (the ranks' logs, a launcher's
combined output, a paste) to a `CheckResults`. `read_run(paths)` reads a run directory's
logs, bounded, through safeio. A line printed twice (a rank's own log and srun's combined
output) counts once.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from mldebug.files import safeio
from mldebug.files.rundir import RunPaths
from mldebug.model.check import (
    CheckRank,
    CheckResults,
    CollectiveTime,
    ComputeRate,
    PairTime,
)
from mldebug.preflight import wire
from mldebug.textsafe import one_line

LOG_LIMIT = 4 << 20  # bytes read of one log: a check prints a few kilobytes
SAID_LIMIT = 8 << 10  # bytes of a rank's stderr tail kept for its failure
SAID_LINES = 6
MAX_RANKS = 1 << 16
RELAYED = re.compile(r"^\[([^\]\s:]+):(\d{1,6})\] (.*)$")


def _number(value: object) -> float | None:
    number = safeio.json_number(value)
    return number if number is not None and number >= 0 else None


def _text(value: object, limit: int = 500) -> str | None:
    return one_line(value[:limit]) if isinstance(value, str) and value else None


def _int_pair(value: object) -> tuple[int, int] | None:
    if isinstance(value, list) and len(value) == 2 and all(type(v) is int for v in value):
        return (value[0], value[1])
    return None


def _str_pair(value: object) -> tuple[str, str] | None:
    if isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value):
        a, b = sorted(one_line(v[:200]) for v in value)
        return (a, b)
    return None


def records_of(lines: Iterable[str]) -> list[dict]:
    """The check records among `lines`, each distinct line once, in order."""
    seen: set[str] = set()
    records = []
    for line in lines:
        record = wire.decode(line.rstrip("\r\n"))
        if record is None:
            continue
        key = line[line.find(wire.MARKER) :].strip()
        if key not in seen:
            seen.add(key)
            records.append(record)
    return records


def results_of(
    lines: Iterable[str],
    world_size: int | None = None,
    said: dict[int, tuple[str, ...]] | None = None,
    transports: dict[int, str] | None = None,
    time_limit_hit: bool = False,
    launcher_said: tuple[str, ...] = (),
    launched_on: dict[int, str] | None = None,
) -> CheckResults:
    """The check's results from its lines; `world_size` where the launcher knows it, else
    the largest a rank said; `said`: ranks' last stderr lines; `transports`: NCCL's
    network per rank; `launched_on`: the host a launcher started a rank on (named for a
    rank that printed nothing)."""
    ranks: dict[int, dict] = {}
    collectives: dict[tuple[str, int], CollectiveTime] = {}
    pairs: list[PairTime] = []
    unsupported: list[str] = []
    sizes: list[int] = []
    for record in records_of(lines):
        rank = record["rank"]
        if len(ranks) >= MAX_RANKS and rank not in ranks:
            continue
        facts = ranks.setdefault(rank, {"rank": rank, "compute": []})
        if isinstance(record.get("host"), str):
            facts["host"] = one_line(record["host"][:200])
        phase = record["phase"]
        facts["last_phase"] = phase
        if phase == wire.PHASE_START:
            facts["started"] = True
            facts["pid"] = record["pid"] if type(record.get("pid")) is int else None
            for key in ("device", "device_name", "backend", "master"):
                facts[key] = _text(record.get(key), 200)
            facts["gpu"] = record.get("gpu") is True
            size = record.get("world_size")
            if type(size) is int and 0 < size <= MAX_RANKS:
                sizes.append(size)
        elif phase == wire.PHASE_CONNECT:
            ok = record.get("ok") is True
            if facts.get("joined") is not False:  # a later failure outranks the join
                facts["joined"] = ok
            if not ok:
                facts["failed_step"] = _text(record.get("step"), 40)
                facts["error"] = _text(record.get("error"), 2000)
        elif phase == wire.PHASE_COLLECTIVE:
            _collective(record, collectives, unsupported)
        elif phase == wire.PHASE_PAIR:
            pair = _pair(record)
            if pair is not None:
                pairs.append(pair)
        elif phase == wire.PHASE_COMPUTE:
            tflops = _number(record.get("tflops"))
            dtype = _text(record.get("dtype"), 20)
            if tflops is not None and dtype:
                shape = record.get("shape")
                facts["compute"].append(
                    ComputeRate(
                        dtype,
                        tflops,
                        tuple(v for v in shape if type(v) is int)
                        if isinstance(shape, list)
                        else (),
                        record["batches"] if type(record.get("batches")) is int else 0,
                    )
                )
        elif phase == wire.PHASE_END:
            facts["finished"] = True
            facts["seconds"] = _number(record.get("seconds"))
    world = world_size or (max(sizes) if sizes else None)
    said, transports = said or {}, transports or {}
    built = []
    for rank in sorted(ranks):
        facts = ranks[rank]
        facts["compute"] = tuple(facts["compute"])
        built.append(CheckRank(**facts, said=said.get(rank, ()), transport=transports.get(rank)))
    # Ranks of the world that printed nothing at all: what they said on stderr is all.
    for rank in sorted(set(said) | set(range(world or 0))):
        if rank not in ranks:
            host = (launched_on or {}).get(rank)
            built.append(CheckRank(rank, host=host, said=said.get(rank, ())))
    built.sort(key=lambda r: r.rank)
    return CheckResults(
        world,
        tuple(built),
        tuple(collectives.values()),
        tuple(pairs),
        tuple(unsupported),
        time_limit_hit,
        launcher_said,
    )


def _collective(record: dict, into: dict, unsupported: list[str]) -> None:
    op = _text(record.get("op"), 40)
    size = record.get("bytes")
    if not op or type(size) is not int:
        return
    if record.get("error") is not None:
        if op not in unsupported:
            unsupported.append(op)
        return
    seconds = _number(record.get("seconds"))
    group = record.get("ranks")
    if seconds and type(group) is int and group > 0:
        into[(op, size)] = CollectiveTime(op, size, seconds, group, _text(record.get("backend")))


def _pair(record: dict) -> PairTime | None:
    hosts, ranks = _str_pair(record.get("hosts")), _int_pair(record.get("ranks"))
    seconds, size = _number(record.get("seconds")), record.get("bytes")
    if hosts is None or ranks is None or not seconds or type(size) is not int:
        return None
    return PairTime(hosts, (min(ranks), max(ranks)), size, seconds)


def _lines(path) -> list[str]:
    try:
        data = safeio.read_head(path, LOG_LIMIT)
    except OSError:
        return []
    return data.decode("utf-8", errors="replace").splitlines()


def stderr_tail(path) -> tuple[str, ...]:
    """The last few non-empty lines of a rank's stderr, each on one printable line."""
    try:
        data, _ = safeio.read_tail(path, SAID_LIMIT)
    except OSError:
        return ()
    lines = [one_line(t)[:300] for t in data.decode("utf-8", errors="replace").splitlines()]
    return tuple([t for t in lines if t.strip()][-SAID_LINES:])


def read_run(
    paths: RunPaths,
    world_size: int | None = None,
    transports: dict[int, str] | None = None,
    time_limit_hit: bool = False,
) -> CheckResults:
    """The results a run directory holds: every rank's stdout log and the launcher's."""
    lines: list[str] = []
    said: dict[int, tuple[str, ...]] = {}
    for rank in paths.rank_ids()[:MAX_RANKS]:
        lines += _lines(paths.stdout(rank))
        said[rank] = stderr_tail(paths.stderr(rank))
    launched = _lines(paths.launcher_log)
    lines += launched
    # `--hosts` relays each rank's output as "[host:rank] line": what a rank that printed
    # no record said (ssh's own complaint included) is its last such lines.
    relayed: dict[int, list[str]] = {}
    launched_on: dict[int, str] = {}
    for line in launched:
        match = RELAYED.match(line)
        if match is None or int(match.group(2)) >= MAX_RANKS:
            continue
        launched_on[int(match.group(2))] = one_line(match.group(1))[:200]
        if wire.MARKER not in line:
            relayed.setdefault(int(match.group(2)), []).append(one_line(match.group(3))[:300])
    for rank, said_lines in relayed.items():
        if not said.get(rank) and rank < MAX_RANKS:
            said[rank] = tuple([t for t in said_lines if t.strip()][-SAID_LINES:])
    launcher = stderr_tail(paths.launcher_log)
    return results_of(lines, world_size, said, transports, time_limit_hit, launcher, launched_on)
