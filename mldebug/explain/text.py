"""A paste as lines a reader can trust: colour codes gone, `\\r` redraws and progress bars
glued to a message split off, launcher prefixes read (and the rank they name kept), each
line still pointing at its file and number.

Pastes come with any prefix: `[rank3]:`, `[host:3] `, `[1,3]<stderr>:`, `3: `, Ray's
`(Worker pid=123) `, a log viewer's `[1743] ` line numbers, `host [stderr] ` of some
launchers. A prefix that names a rank gives the line its rank; the others are only removed.
Pure functions, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from mldebug.nccl.logformats import prefixes

MAX_LINE = 4096  # characters kept of one line
MAX_LINES = 400_000  # lines kept of one source
MAX_RANK = 65_535  # a bracketed number above this is a line number, not a rank

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-_]|\x1b")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
# tqdm and `datasets` bars: "Map:  45%|████▌     | 4500/10000 [00:30<00:36, 150.2 examples/s]"
PROGRESS = re.compile(
    r"(?P<label>[^|\r\n]{0,80}?)\s*(?P<pct>\d{1,3})%\|[^|\n]{0,120}\|\s*"
    r"(?P<done>\d+)/(?P<total>\d+)\s*(?:\[[^\]\n]{0,100}\])?"
)
_RANK_TAG = re.compile(r"\[(?:PG (?:ID )?\d+ (?:PG GUID \S+ |\(\w+\) )?)?Rank (\d+)\]")
_EXTRA = re.compile(
    r"\((?:[\w.-]+ )?pid=\d+(?:, ip=[\d.]+)?\) "  # Ray: (TrainWorker pid=123, ip=10.0.0.2)
    r"|[\w.-]+ \[std(?:out|err)\] "  # some launchers: host [stderr]
    r"|\[(?:trainer|worker|default)(?P<wrank>\d+)(?:\|\d+)?\]:"  # torchx / torchrun roles
)


# torchrun's --log-line-prefix-template (`node7:3:`, `3:`): a host that starts with a letter
# and a rank, or a rank alone, each followed by ":" and no digit (NCCL's `host:pid:tid` and a
# clock's `10:41:05` have digits there).
_TEMPLATE = re.compile(
    r"(?:(?P<host>[A-Za-z][\w.-]{0,63}):(?P<hrank>\d{1,5})|(?P<rank>\d{1,5})):(?!\d)"
)


@dataclass(frozen=True)
class Line:
    """One line of a source, cleaned: `text` is what follows the launcher prefixes."""

    source: str
    number: int  # 1-based, in its source
    text: str
    rank: int | None = None  # the rank a prefix (or the file's path) names
    host: str | None = None
    progress: bool = False  # a progress bar, split off what it was glued to

    @property
    def where(self) -> str:
        return f"{self.source}:{self.number}"

    @property
    def ranks(self) -> tuple[int, ...]:
        """The rank its prefix names, as a finding's ranks (none when no prefix names one)."""
        return (self.rank,) if self.rank is not None else ()


def _segments(raw: str) -> list[tuple[str, bool]]:
    """The pieces of one physical line: `\\r` redraws, and a bar with a message run into it."""
    out: list[tuple[str, bool]] = []
    for part in raw.split("\r"):
        if not part.strip():
            continue
        rest = part
        while rest:
            bar = PROGRESS.search(rest) if "%|" in rest else None  # the search is costly
            if bar is None:
                out.append((rest, False))
                break
            before, after = rest[: bar.start("pct")], rest[bar.end() :]
            label = before.strip()
            if label and bar.group("label").strip() != label:
                out.append((before[: len(before) - len(bar.group("label"))], False))
            out.append((rest[bar.start() : bar.end()], True))
            rest = after if after.strip() else ""
    return out


def _prefix(text: str) -> tuple[str | None, int | None, int]:
    host, rank, pos = None, None, 0
    while True:
        extra = _EXTRA.match(text, pos)
        if extra and extra.end() > pos:
            if extra.group("wrank"):
                rank = int(extra.group("wrank")[:6])
            pos = extra.end()
            continue
        got_host, got_rank, end = prefixes(text[pos:])
        if end == 0:
            template = _TEMPLATE.match(text, pos) if pos == 0 else None
            if template is None:
                return host, rank, pos
            got_host = template.group("host")
            got_rank = int(template.group("hrank") or template.group("rank"))
            end = template.end() - pos
        if got_rank is not None and got_rank <= MAX_RANK:
            rank = got_rank
        host = got_host or host
        pos += end


# A long log is read only around the lines that hold one of these (each reader's words,
# and mldebug.nccl's): the NCCL INFO lines that make most of such a log hold none of them.
WORDS = (
    "rror",
    "xception",
    "Traceback",
    "File ",
    ".py",
    "nterrupt",
    "Exit",
    "mismatch",
    "grad",
    "reduction",
    "ready only once",
    "address",
    "FullMesh",
    "Using",
    "SOCKET_IFNAME",
    "NET/IB :",
    "NET/IB:",
    "NET/Socket :",
    "NCCL_",
    "plugin",
    "interface",
    "Duplicate",
    "busId",
    "ailure",
    "calloc",
    "nccl",
    "WARN",
    "Last",
    "ersion",
    "Root Cause",
    "exitcode",
    "memory",
    "loss scale",
    "P2P=",
    "Peer",
    "MiB",
    "Process ",
    "Thread ",
    "%|",
    ".cc:",
    "ank ",
    "[c10d]",
    "Watchdog",
    "atchdog",
    "imed out",
    "imeout",
    "onnect",
    "nranks",
    "Signal",
    "SIG",
)
_WORDS = re.compile("|".join(re.escape(word) for word in WORDS))


def words_of(cues: tuple[str, ...]) -> tuple[str, ...]:
    """WORDS and, of each cue (a message's fixed text) WORDS does not find, its longest
    word: the words whose lines a long text keeps."""
    extra = []
    for cue in cues:
        if cue and not _WORDS.search(cue):
            extra.append(max(re.findall(r"[\w=`]+", cue) or [cue], key=len))
    return WORDS + tuple(sorted(set(extra)))


def words_pattern(cues: tuple[str, ...]) -> re.Pattern[str]:
    """words_of(cues) as one short pattern for split_lines (a long alternation costs per
    line)."""
    return re.compile("|".join(re.escape(word) for word in words_of(cues)))


SMALL = 20_000  # lines: a paste or a short log is read whole
AROUND = 60  # lines kept before and after each line holding a word


def _kept(raw: list[str], words: re.Pattern[str]) -> list[int]:
    """The numbers (0-based) of the lines worth reading: all of a short text; in a long
    one, the lines around those holding one of WORDS."""
    if len(raw) <= SMALL:
        return list(range(len(raw)))
    keep = bytearray(len(raw) + 1)
    for index, line in enumerate(raw):
        if words.search(line):
            start = max(0, index - AROUND)
            keep[start : index + AROUND + 1] = b"\1" * (min(len(raw), index + AROUND + 1) - start)
    return [i for i in range(len(raw)) if keep[i]]


def split_lines(
    data: str, source: str, rank: int | None = None, words: re.Pattern[str] | None = None
) -> list[Line]:
    """Every line of `data` (a paste, a file), cleaned; `rank` for lines no prefix names.
    A long text keeps the lines around those holding one of `words` (default WORDS)."""
    raws = data.split("\n")[:MAX_LINES]
    return cleaned(((i + 1, raws[i]) for i in _kept(raws, words or _WORDS)), source, rank)


def cleaned(
    numbered: Iterable[tuple[int, str]], source: str, rank: int | None = None
) -> list[Line]:
    """The lines given by their numbers (1-based), cleaned: what split_lines and a big
    file's streamed read (stream.py) both hand to the readers."""
    lines: list[Line] = []
    for number, raw in numbered:
        raw = raw[:MAX_LINE]
        if "\x1b" in raw:
            raw = _ANSI.sub("", raw)
        for part, is_bar in _segments(raw):
            part = _CONTROL.sub("", part)
            host, prefix_rank, pos = _prefix(part)
            text = part[pos:].rstrip()
            if not text:
                continue
            if prefix_rank is None and "Rank " in text:
                tag = _RANK_TAG.search(text)  # torch's own "[Rank 3]", "[PG 0 Rank 3]"
                if tag and len(tag.group(1)) < 6:
                    prefix_rank = int(tag.group(1))
            lines.append(
                Line(
                    source,
                    number,
                    text,
                    prefix_rank if prefix_rank is not None else rank,
                    host,
                    is_bar,
                )
            )
    return lines


def normalised(lines: list[Line]) -> bytes:
    """The lines as `mldebug.nccl`'s parser reads them best: one line per segment, every
    rank this module found written as torch's own `[rankN]:` prefix."""
    out = []
    for line in lines:
        head = f"[rank{line.rank}]:" if line.rank is not None else ""
        out.append(head + line.text)
    return ("\n".join(out) + "\n").encode("utf-8", "replace")


def ranks_seen(lines: list[Line]) -> set[int]:
    return {line.rank for line in lines if line.rank is not None}


def window(lines: list[Line], index: int, before: int = 0, after: int = 12) -> list[Line]:
    """The lines around `index` from the same source (a message wrapped over several)."""
    source = lines[index].source
    start = max(0, index - before)
    return [line for line in lines[start : index + after + 1] if line.source == source]


def compact(text: str) -> str:
    """`text` without any whitespace: a message a terminal wrapped (and indented) reads
    the same as the message whole."""
    return re.sub(r"\s+", "", text)
