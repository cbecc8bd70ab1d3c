"""A big log read for explain's readers in one pass, in bounded memory: the lines around
those holding one of the readers' words (files/picked.py picks them, grep where there is
one), of which a file keeps at most HEAD + TAIL, plus, between the two, the lines around
each word-line of a shape not seen before (digits aside): a message said a million times is
kept where it starts, where it ends, and once in between; a new one anywhere.

`begin` starts the reading of the big files among a command's paths (Hyperscan's scan of
their blocks and the count of their lines, files/picked.py) before the command imports
the engine and the report, which then load while it runs.
"""

from __future__ import annotations

import os
import re
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from mldebug.explain.text import AROUND
from mldebug.files import picked, safeio

HEAD = 50_000  # lines kept from the start of a file's kept lines
TAIL = 50_000  # and from its end
MIDDLE = 50_000  # lines kept between them: around the word-lines of a new shape
MAX_SHAPES = 100_000  # shapes remembered between head and tail
MAX_KEPT_BYTES = 8 << 20  # text kept in each of head, middle and tail
_DIGITS = re.compile(rb"\d+")
# The words that keep a long log's lines: text.WORDS and the cues of the catalog's messages
# that readers/messages.py reads, and the words of the lines mldebug.nccl's parser looks at
# (it reads the lines kept), as engine.stream_words() makes them. Written out here: the
# command begins a big log's read (`begin`) before it imports the catalog and the model
# they come from (tests/test_explain_stream.py checks that they are still those).
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
    "=========",
    "Assertion",
    "DataLoader",
    "NVRM",
    "Segmentation",
    "`lr_scheduler",
    "appears",
    "destroy_process_group",
    "destroyed",
    "determine",
    "distributed",
    "expected",
    "expects",
    "exploding",
    "failed",
    "fallen",
    "find_unused_parameters=True",
    "library",
    "parameter",
    "recovery",
    "server",
    "NCCL WARN",
    "busId ",
    "[TC]",
)

Numbered = tuple[int, bytes, bool]  # line number (1-based), its bytes, holds a word


@dataclass
class Kept:
    """The lines a file keeps, bounded (the module's docstring says which)."""

    head: list[tuple[int, bytes]] = field(default_factory=list)
    middle: list[tuple[int, bytes]] = field(default_factory=list)
    tail: deque[Numbered] = field(default_factory=deque)
    dropped: int = 0  # lines that held a word or stood near one, not kept
    _sizes: list[int] = field(default_factory=lambda: [0, 0, 0])
    _shapes: set[int] = field(default_factory=set)  # their hashes: a few bytes each
    _before: deque[Numbered] = field(default_factory=lambda: deque(maxlen=AROUND))
    _after_until: int = 0

    def add(self, number: int, raw: bytes, hit: bool) -> None:
        if len(self.head) < HEAD and self._sizes[0] < MAX_KEPT_BYTES:
            self.head.append((number, raw))
            self._sizes[0] += len(raw)
            return
        self.tail.append((number, raw, hit))
        self._sizes[2] += len(raw)
        while len(self.tail) > TAIL or self._sizes[2] > MAX_KEPT_BYTES:
            old = self.tail.popleft()
            self._sizes[2] -= len(old[1])
            self._between(old)

    def _between(self, line: Numbered) -> None:
        number, raw, hit = line
        if hit and self._new_shape(raw):
            for before in self._before:
                if number - before[0] <= AROUND:
                    self._keep(before)
                else:
                    self.dropped += 1
            self._before.clear()
            self._keep(line)
            self._after_until = number + AROUND
        elif number <= self._after_until:
            self._keep(line)
        else:
            if len(self._before) == self._before.maxlen:
                self.dropped += 1
            self._before.append(line)

    def _new_shape(self, raw: bytes) -> bool:
        shape = hash(_DIGITS.sub(b"#", raw[:400]))
        if shape in self._shapes or len(self._shapes) >= MAX_SHAPES:
            return False
        self._shapes.add(shape)
        return True

    def _keep(self, line: Numbered) -> None:
        if len(self.middle) >= MIDDLE or self._sizes[1] >= MAX_KEPT_BYTES:
            self.dropped += 1
            return
        self.middle.append((line[0], line[1]))
        self._sizes[1] += len(line[1])

    def lines(self) -> list[tuple[int, str]]:
        """The kept lines in file order, decoded."""
        self.dropped += len(self._before)
        self._before.clear()
        out = self.head + self.middle + [(n, raw) for n, raw, _ in self.tail]
        return [(n, raw.decode("utf-8", "replace")) for n, raw in out]


@dataclass
class Streamed:
    lines: list[tuple[int, str]]  # (number, text) of the lines kept
    count: int  # lines in the file
    size: int  # bytes read
    dropped: int  # lines near a word not kept (the bounds)


TRACE_SUFFIXES = (".json", ".json.gz")  # a file named so is read as a profiler trace


def begin(paths: Sequence[str], words: tuple[str, ...] = WORDS) -> list[picked.Begun]:
    """The reads of the big regular files among `paths`, begun now (files/picked.py
    `begin`: those it would narrow; not stdin, not a trace); each to be stopped once read
    (or not: a file the engine finds is no log)."""
    out = []
    try:
        for path in dict.fromkeys(paths):
            if path == "-" or path.endswith(TRACE_SUFFIXES):
                continue
            if (begun := picked.begin(path, words)) is not None:
                out.append(begun)
    except BaseException:  # an interrupt: nothing is left reading
        for begun in out:
            begun.stop()
        raise
    return out


def read_log(
    path: str,
    words: tuple[str, ...],
    grep: str | None = "grep",
    begun: Sequence[picked.Begun] = (),
) -> Streamed:
    """The lines of a file the readers need: those within AROUND lines of one holding one
    of `words`, bounded. `grep`: the program to ask (None: Python alone). `begun`: reads
    begun ahead (`begin`); the one of this file, if any, is carried on. OSError if the
    file cannot be opened or read."""
    fd = safeio.open_regular(path)
    kept: list[Kept] = []

    def start() -> picked.Sink:
        kept[:] = [Kept()]
        return kept[0].add

    try:
        ahead = next((b for b in begun if b.words == words and b.same(fd)), None)
        if ahead is not None:  # read from where it began: the bytes it is reading
            size = ahead.size
            count = picked.pick(ahead.fd, path, words, start, AROUND, AROUND, grep, ahead)
        else:
            size = os.fstat(fd).st_size
            count = picked.pick(fd, path, words, start, AROUND, AROUND, grep)
    finally:
        os.close(fd)
    return Streamed(kept[0].lines(), count, size, kept[0].dropped)
