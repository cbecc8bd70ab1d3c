"""Read every source, run every reader, rank what they found by how sure they are.

The NCCL and Flight Recorder part is `mldebug.nccl.scan` (the same parser `mldebug nccl`
and the TUI's NCCL tab use); the readers of `readers/` run over the same text as lines.
Findings of both are put side by side, the ones a more specific reader says better are
dropped, and the rest are sorted: most sure first.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from mldebug.analysis.judge import Evidence, judge
from mldebug.explain import stream, traces
from mldebug.explain.catalog import OWN
from mldebug.explain.finding import (
    EXPLAIN_KINDS,
    KIND_CHILD_FAILED,
    KIND_DUPLICATE_GPU,
    KIND_NCCL_CUDA_OOM,
    KIND_NCCL_ERROR,
    KIND_PYTHON_ERROR,
    KIND_SEQ_SPREAD,
    KIND_TIMEOUT_SUSPECT,
    Explained,
    Explanation,
    Source,
)
from mldebug.explain.readers import (
    collectives,
    devices,
    elastic,
    memory,
    messages,
    ncclerrors,
    network,
    stacks,
    timeouts,
    tracebacks,
)
from mldebug.explain.text import (
    Line,
    cleaned,
    normalised,
    ranks_seen,
    split_lines,
    words_of,
    words_pattern,
)
from mldebug.files import picked, rundir, safeio
from mldebug.model import (
    KIND_CONNECTION,
    KIND_DIST_ERROR,
    KIND_NCCL_INIT,
    KIND_NCCL_NETWORK,
    KIND_NCCL_TIMEOUT,
    KIND_NCCL_VERSION,
    KIND_NCCL_WARNING,
    KIND_OUTLIER,
    SEVERITY_ERROR,
    SOURCE_FLIGHT,
    SOURCE_RAS,
    SOURCE_WATCHDOG,
    Finding,
)
from mldebug.nccl import scan as nccl_scan
from mldebug.nccl.logfacts import FileLog
from mldebug.nccl.logformats import KEYWORDS
from mldebug.nccl.logparse import parse_bytes, rank_of_path
from mldebug.ras import read as ras_read
from mldebug.ras.model import RasReport
from mldebug.ras.verdict import KIND_NCCL_RAS

MAX_SOURCE_BYTES = 32 << 20  # a paste on stdin read for the line readers
WHOLE_BYTES = 8 << 20  # a file up to this size is read whole; a bigger one is streamed
MAX_TOTAL_BYTES = 128 << 20  # text kept for the readers of all files together
STDIN = "<stdin>"
# The words that keep a long text's lines for the readers (split_lines): text.WORDS and the
# cues of the catalog's messages that readers/messages.py reads; a streamed file also keeps
# the lines mldebug.nccl's parser looks at (it reads the lines kept).
CUES = tuple(message.cue for message in OWN)
WORDS = words_pattern(CUES)
STREAM_WORDS = stream.WORDS  # stream_words(), written out there


def stream_words() -> tuple[str, ...]:
    """The words whose lines a big log keeps, as the catalog and mldebug.nccl's keywords
    make them (stream.WORDS holds them written out)."""
    return tuple(dict.fromkeys(words_of(CUES) + tuple(k.decode() for k in KEYWORDS)))


# How sure a finding of mldebug.nccl is, by kind, when it stands beside explain's readers.
NCCL_SURE = {
    KIND_NCCL_TIMEOUT: 0.72,
    KIND_NCCL_INIT: 0.7,
    KIND_NCCL_NETWORK: 0.75,
    KIND_NCCL_VERSION: 0.8,
    KIND_CONNECTION: 0.66,
    KIND_DIST_ERROR: 0.7,
    KIND_NCCL_WARNING: 0.35,
    KIND_NCCL_RAS: 0.8,
}
FR_SURE = 0.85
# The words of the lines a finding of mldebug.nccl rests on, by kind.
NCCL_WORDS = {
    KIND_NCCL_TIMEOUT: (
        "Watchdog caught",
        "timed out",
        "last enqueued",
        "watchdog got stuck",
        "Heartbeat monitor",
    ),
    KIND_NCCL_INIT: ("Init START", "Init COMPLETE"),
    KIND_NCCL_NETWORK: ("Using network", "NET/IB", "NET/Socket"),
    KIND_NCCL_VERSION: ("NCCL version", "cudaDriverVersion"),
    KIND_CONNECTION: ("onnection", "onnect", "clients joined"),
    KIND_DIST_ERROR: ("Timed out waiting", "enforce fail", "monitoredBarrier", "NCCL error"),
    KIND_NCCL_WARNING: ("NCCL WARN",),
    KIND_NCCL_RAS: ("MISMATCH", "INCOMPLETE", "DEAD", "launched up to", " -- GPU "),
}


def _fact(finding: Finding | Explained, name: str) -> str | None:
    return next((value for key, value in finding.facts if key == name), None)


def _behind(finding: Finding) -> bool:
    """A rank behind, by the ledger (the NCCL watchdog's counts): the ranks it names are
    those the others waited for."""
    return finding.kind == KIND_OUTLIER and SOURCE_WATCHDOG in finding.sources


def _words_kind(finding: Finding) -> str:
    """The kind whose lines a finding rests on: a ledger verdict (a rank behind, a hang) by
    the source that saw it (the watchdog's lines, RAS's report), else its own kind."""
    if SOURCE_WATCHDOG in finding.sources:
        return KIND_NCCL_TIMEOUT
    if SOURCE_RAS in finding.sources:
        return KIND_NCCL_RAS
    return finding.kind


def _cite(finding: Finding, lines: list[Line]) -> list[Line]:
    words = NCCL_WORDS.get(_words_kind(finding), ())
    if finding.kind == KIND_NCCL_WARNING and finding.location:
        # one WARN message: NCCL prints its source location before "NCCL WARN"
        words = (f"{finding.location} NCCL WARN",)
    ranks = set(finding.ranks)
    hits = [line for line in lines if any(w in line.text for w in words)]
    # the finding's own ranks' lines first (a partition: a long paste stays linear)
    return [ln for ln in hits if ln.rank in ranks] + [ln for ln in hits if ln.rank not in ranks]


def _from_nccl(found: list[Finding], lines: list[Line], dumps: list) -> list[Explained]:
    out = []
    for finding in found:
        flight = SOURCE_FLIGHT in finding.sources
        if flight:
            sure, cited = FR_SURE, []
        else:
            sure = NCCL_SURE.get(_words_kind(finding), 0.5)
            if _behind(finding):
                sure = 0.88
            if finding.kind == KIND_NCCL_VERSION and finding.severity != SEVERITY_ERROR:
                sure = 0.4
            cited = _cite(finding, lines)
        explained = Explained.of(finding, sure).cited(cited)
        if flight:
            explained = replace(explained, lines=tuple(d.path for d in dumps[:4]))
        out.append(explained)
    return out


def _drop_restated(mine: list[Explained], theirs: list[Explained]) -> list[Explained]:
    """mldebug.nccl's findings that one of explain's readers says better."""
    kinds = {f.kind for f in mine}
    kept = []
    for f in theirs:
        if f.kind == KIND_NCCL_TIMEOUT and kinds & {KIND_TIMEOUT_SUSPECT, KIND_SEQ_SPREAD}:
            continue  # a timeout that names nobody behind: the readers say it better
        if f.kind == KIND_DIST_ERROR and kinds & {
            KIND_NCCL_ERROR,
            KIND_DUPLICATE_GPU,
            KIND_NCCL_CUDA_OOM,
        }:
            if _fact(f, "error") == "nccl":
                continue
        kept.append(f)
    return kept


def run_readers(
    lines: list[Line], scan: nccl_scan.Scan, more: Sequence[Explained] = ()
) -> list[Explained]:
    """Every reader over `lines`, beside what mldebug.nccl found in the same text (and
    what `more` sources found: the profiler traces), judged together."""
    mine: list[Explained] = []
    # Progress bars split off the lines they were glued to stand between a message's lines:
    # only the timeouts reader, which asks who was still busy, reads them.
    text = [line for line in lines if not line.progress]
    for reader in (messages, collectives, network, ncclerrors, elastic, memory, devices, stacks):
        mine += reader.read(text)
    mine += timeouts.read(lines, scan.ranks)
    theirs = _drop_restated(mine, _from_nccl(scan.findings, lines, scan.dumps))
    said = {where for f in mine for where in f.lines}
    # A WARN line one of the readers explained is not a finding of its own.
    theirs = [f for f in theirs if f.kind != KIND_NCCL_WARNING or not said & set(f.lines)]
    claimed = {where for f in mine + theirs for where in f.lines}
    return judged(_root_causes(mine + theirs + tracebacks.read(text, claimed) + list(more)))


def judged(found: list[Explained]) -> list[Explained]:
    """The readers' findings through the one judge (analysis/judge.py): the same thing said
    twice is one finding, and the verdict is ordered most sure first. Each finding goes in
    by its fields and comes back as the reader's own (its lines, fix and note)."""
    tagged = [
        replace(f.as_finding(), facts=f.facts + ((_TAG, str(i)),), confidence=f.confidence)
        for i, f in enumerate(found)
    ]
    out = []
    for finding in judge(Evidence(found=tuple(tagged))):
        first = found[int(dict(finding.facts)[_TAG])]
        out.append(replace(first, ranks=finding.ranks, severity=finding.severity))
    return out


_TAG = "explained"  # a fact the judge carries through: which reader's finding this is


def _waited_for(finding: Explained) -> bool:
    """Does the finding name the ranks the others waited for (not those that waited)?"""
    return finding.kind == KIND_TIMEOUT_SUSPECT or bool(finding.waiting)


RECIPE_CRASH = "rank-crash"
WAITED = "; the other ranks then waited for it"
LAUNCHER_FOLLOWS = "; the launcher's failure follows it"


def _root_causes(found: list[Explained]) -> list[Explained]:
    """A traceback of the rank the others waited for, or of the rank torchelastic says
    failed first, is the cause: it goes above the waiting and the summary."""
    suspects = {r for f in found if _waited_for(f) for r in f.ranks}
    failed = [f for f in found if f.kind == KIND_CHILD_FAILED and f.recipe == RECIPE_CRASH]
    out = []
    for f in found:
        if f.kind == KIND_PYTHON_ERROR and (
            (f.ranks and set(f.ranks) <= suspects) or (failed and not f.ranks)
        ):
            after = WAITED if suspects else LAUNCHER_FOLLOWS
            f = replace(
                f,
                confidence=max(f.confidence, 0.9 if suspects else 0.7),
                recipe=f.recipe or RECIPE_CRASH,
                then=after,
            )
        out.append(f)
    return out


_RAS_START = re.compile(r"^[ \t]*NCCL version \S+ compiled with CUDA", re.MULTILINE)
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")


def ras_in(text: str, source: str) -> list[RasReport]:
    """A saved `ncclras` answer pasted (alone, or after other output): NCCL's RAS reader
    (`mldebug nccl`'s) reads it from its first line on."""
    start = _RAS_START.search(text) if "compiled with CUDA" in text else None
    if start is None:
        return []
    data = _ANSI.sub("", text[start.start() :].replace("\r", ""))
    try:
        return [ras_read.parse_ras(data.encode("utf-8", "replace"), source)]
    except ras_read.RasError:
        return []


def _read_log(
    path: str, rank: int | None, begun: Sequence[picked.Begun] = ()
) -> tuple[list[Line], Source, int]:
    """A file's lines for the readers, its Source and the bytes of text kept: a small file
    whole; a big one streamed in one pass (stream.py), the lines around the readers' words
    kept, in bounded memory (`begun`: its read begun ahead, stream.begin)."""
    fd = safeio.open_regular(path)
    try:  # its size first: a big one is not read here
        big = os.fstat(fd).st_size > WHOLE_BYTES
        data = b"" if big else safeio.read_fd(fd, WHOLE_BYTES + 1)
    finally:
        os.close(fd)
    if not big and len(data) <= WHOLE_BYTES:  # (it may have grown since its size was read)
        lines = split_lines(data.decode("utf-8", "replace"), path, rank, WORDS)
        return lines, Source(path, data.count(b"\n"), len(data)), len(data)
    del data
    got = stream.read_log(path, STREAM_WORDS, begun=begun)
    lines = cleaned(got.lines, path, rank)
    kept = sum(len(text) for _, text in got.lines)
    return lines, Source(path, got.count, got.size, got.dropped > 0), kept


def _parsed(lines: list[Line], source: str, rank: int | None = None) -> FileLog:
    """`mldebug.nccl`'s parse of the lines as explain cleaned them (prefixes it alone
    knows, torch's `[Rank N]` on lines of one file, progress bars split off)."""
    data = normalised(lines)  # the path's rank is already on the lines no prefix names
    del rank
    return FileLog(source, parse_bytes(data, source), len(data), len(lines))


def explain(
    paths: list[str], stdin: bytes | None = None, begun: Sequence[picked.Begun] = ()
) -> Explanation:
    """What `paths` (files, directories, run directories) and a paste on stdin say.
    `begun`: the reads of big files among them begun ahead (stream.begin)."""
    result = Explanation()
    files = [p for p in paths if p != "-"]
    pasted = traces.pasted_paths(stdin.decode("utf-8", "replace")) if stdin else None
    if pasted is not None:  # a paste of trace file names: the files, not the text
        files, stdin = files + pasted, None
    found_traces, named = traces.trace_paths(files)
    files = [p for p in files if p not in named]
    read = traces.read_traces(found_traces)
    result.traces, result.trace_bytes = read.traces, sum(read.sizes.values())
    result.problems += read.problems
    # mldebug.nccl only finds the logs: it parses the lines kept for the readers below
    found = nccl_scan.scan_paths(files, parse_logs=False) if files else nccl_scan.Scan()
    in_folders = set(found_traces)  # a folder's traces are not logs
    found.logs = [log for log in found.logs if log.path not in in_folders]
    result.problems += found.problems
    scan = nccl_scan.Scan(dumps=found.dumps, problems=found.problems, ras=found.ras)
    total = 0
    for log in found.logs:
        if log.error is not None:
            continue
        if total >= MAX_TOTAL_BYTES:
            result.problems.append(f"{log.path}: not read for explain (the total read is capped)")
            continue
        rank = rank_of_path(log.path)
        try:
            lines, source, kept = _read_log(log.path, rank, begun)
        except OSError as error:
            result.problems.append(f"{log.path}: {error.strerror or error}")
            continue
        total += kept
        scan.logs.append(_parsed(lines, log.path, rank))
        result.lines += lines
        result.sources.append(source)
    if stdin is not None:
        data = stdin[:MAX_SOURCE_BYTES]
        if data.strip():
            text = data.decode("utf-8", "replace")
            scan.ras += ras_in(text, STDIN)
            lines = split_lines(text, STDIN, words=WORDS)
            scan.logs.append(_parsed(lines, STDIN))
            result.lines += lines
            result.sources.append(
                Source(STDIN, data.count(b"\n"), len(data), len(stdin) > len(data))
            )
    nccl_scan.finish(scan)
    for name in files:
        if os.path.isdir(os.path.join(name, "ranks")):  # a run directory: ranks by pid
            nccl_scan.join_pids(scan, rundir.RunPaths(Path(name)))
    if any(p.rank is not None for log in scan.logs for p in log.procs):
        nccl_scan.finish(scan)
    result.scan = scan
    result.ranks = ranks_seen(result.lines) | {r.rank for r in scan.ranks if r.rank is not None}
    result.ranks |= {t.rank for t in read.traces}
    result.findings = run_readers(result.lines, scan, traces.explained(read.traces))
    return result


def explain_text(text: str, source: str = STDIN) -> list[Explained]:
    """The findings of one text (the TUI's search box, tests, the benchmark)."""
    lines = split_lines(text, source, words=WORDS)
    scan = nccl_scan.Scan(logs=[_parsed(lines, source)], ras=ras_in(text, source))
    nccl_scan.finish(scan)
    return run_readers(lines, scan)


SURE = 0.6  # what the live view takes from explain: findings at least this sure


def sure_recipes(text: str) -> list[str]:
    """The recipes of what explain is sure `text` says, most sure first (the live view's
    Recipes search puts them before the words' own ranking)."""
    return [f.recipe for f in explain_text(text) if f.recipe and f.confidence >= SURE]


def sure_findings(name: str, lines: Sequence[str]) -> list[Finding]:
    """explain's sure findings of its own kinds (interfaces, duplicate GPUs, NCCL's own OOM...)
    in one NCCL log's tail, as dump's findings: what the live view's NCCL tab adds."""
    found = explain_text("\n".join(lines), name)
    return [f.as_finding() for f in found if f.confidence >= SURE and f.kind in EXPLAIN_KINDS]
