"""`mldebug explain` over torch.profiler traces: which paths are traces, each read as one
rank (mldebug.traces), and what they show as explain's findings for the one judge.

A trace is a file named `*.json` or `*.json.gz` (torch's own `*.pt.trace.json[.gz]`
included) whose head reads like a Chrome trace; named on the command line, in a folder
given (never through a symlink, bounded depth and count), or as a paste of file names.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from mldebug.explain import stream
from mldebug.explain.finding import Explained
from mldebug.files import safeio

# The trace readers are imported where a trace is asked about: explain of a log alone does
# not load them (its imports run beside a big log's read, stream.begin).
if TYPE_CHECKING:
    from mldebug.traces.model import RankTrace

SUFFIXES = stream.TRACE_SUFFIXES
MAX_DEPTH = 8
MAX_TRACES = 4096  # files read as traces in one run
MAX_PASTED = 4096  # lines of a paste read as file names


@dataclass
class TraceRead:
    traces: list[RankTrace] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    sizes: dict[str, int] = field(default_factory=dict)  # path -> bytes on disk


def is_trace(path: str) -> bool:
    """A regular file (not a symlink) named like a trace whose head reads like one."""
    if not path.endswith(SUFFIXES):
        return False
    from mldebug.traces.stream import head_of, looks_like_trace

    try:
        return stat.S_ISREG(os.lstat(path).st_mode) and looks_like_trace(head_of(path))
    except OSError:
        return False


def _not_other(path: str) -> bool:
    """A JSON file named on the command line that no other reader of explain knows (a
    Flight Recorder dump, NCCL RAS's JSON): read as a trace, or said why it is not one."""
    from mldebug import flight
    from mldebug.ras import read as ras_read

    try:
        head = safeio.read_head(path, 4096)
    except OSError:
        return True  # read_traces says why
    return not flight.looks_like_flight_dump(path, head) and not ras_read.looks_like_ras(head)


def _walk(root: str, depth: int = 0) -> list[str]:
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError:
        return []
    out = []
    for entry in entries:
        if entry.name.startswith("."):
            continue
        try:
            if entry.is_dir(follow_symlinks=False):
                if depth < MAX_DEPTH:
                    out += _walk(entry.path, depth + 1)
            elif entry.is_file(follow_symlinks=False) and is_trace(entry.path):
                out.append(entry.path)
        except OSError:
            continue
        if len(out) > MAX_TRACES:
            break
    return out


def trace_paths(paths: list[str]) -> tuple[list[str], list[str]]:
    """The traces among `paths` (files, and those under folders), and the files named
    that are traces (explain's other readers leave them alone)."""
    found, named = [], []
    for path in paths:
        try:
            mode = os.lstat(path).st_mode
        except OSError:
            continue
        if stat.S_ISDIR(mode):
            found += _walk(path)
        elif stat.S_ISREG(mode) and path.endswith(SUFFIXES) and _not_other(path):
            found.append(path)  # read as a trace, or said why it is not one
            named.append(path)
    return list(dict.fromkeys(found)), named


def pasted_paths(text: str) -> list[str] | None:
    """A paste that is nothing but names of trace files (one a line): those names."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines or len(lines) > MAX_PASTED or not all(line.endswith(SUFFIXES) for line in lines):
        return None
    return lines


def read_traces(paths: list[str]) -> TraceRead:
    """Each path as one rank's trace; a file that is not one is one line in `problems`."""
    out = TraceRead()
    if not paths:
        return out
    from mldebug.traces.read import rank_of_name, read_rank
    from mldebug.traces.stream import TraceError

    by_rank: dict[int, str] = {}
    unnamed: list[RankTrace] = []
    for path in paths[:MAX_TRACES]:
        try:
            info = os.lstat(path)
            if stat.S_ISLNK(info.st_mode):
                out.problems.append(f"{path}: a symbolic link; give the file it points to")
                continue
            trace, rank = read_rank(path)
        except TraceError as error:
            out.problems.append(f"{path}: {error}")
            continue
        except OSError as error:
            out.problems.append(f"{path}: {error.strerror or error}")
            continue
        if rank is None:
            rank = rank_of_name(path)
        if rank is not None and rank in by_rank:
            out.problems.append(
                f"{path}: a second trace of rank {rank} (after {by_rank[rank]}); left out"
            )
            continue
        out.sizes[path] = info.st_size
        if trace.cut:
            out.problems.append(f"{path}: only its first part was read (the trace is too long)")
        if rank is None:
            unnamed.append(trace)
            continue
        by_rank[rank] = path
        out.traces.append(_as_rank(trace, rank))
    free = (r for r in range(len(paths) + len(by_rank) + 1) if r not in by_rank)
    # no rank in the file or its name: the first free numbers, in order
    for trace, rank in zip(unnamed, free, strict=False):
        out.problems.append(f"{trace.source}: says no rank; called rank {rank}")
        out.traces.append(_as_rank(trace, rank))
    out.traces.sort(key=lambda t: t.rank)
    return out


def _as_rank(trace: RankTrace, rank: int) -> RankTrace:
    return replace(trace, rank=rank)


def explained(traces: list[RankTrace]) -> list[Explained]:
    """The traces' findings as explain's, each resting on the files it read."""
    if not traces:
        return []
    from mldebug.traces.findings import trace_findings

    files = tuple(t.source for t in traces)
    out = []
    for finding in trace_findings(traces):
        sure = finding.confidence if finding.confidence is not None else 0.5
        cited = tuple(t.source for t in traces if t.rank in finding.ranks) or files
        out.append(Explained.of(finding, sure, lines=cited[:64]))
    return out
