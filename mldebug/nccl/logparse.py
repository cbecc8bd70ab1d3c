"""One pass over NCCL debug output and torch.distributed error text, in constant memory.

A file is read in binary, a chunk at a time. Only lines that hold one of a few keywords are
looked at (`bytes.find` over the chunk, in C), so the `Channel 00/64 : 0` lines that make up
most of an INFO log cost nothing but the search; a line is cut at MAX_LINE bytes and never
held whole, and undecodable bytes are replaced. What each process said is gathered into a
`ProcLog`, whose every list and map is capped, so a file of any size or content costs the
same memory.

Formats (facts from NCCL's src/debug.cc, init.cc and checks.h of 2.7 to 2.29, and torch's
ProcessGroupNCCL.cpp, ProcessGroupGloo.cpp and TCPStore of 1.x to 2.13):

    host:pid:tid [dev] NCCL INFO message
    \\n[2026-12-01 00:23:43] host:pid:tid [dev] file.cc:line (func) NCCL WARN message
    host:pid:tid [dev] file.cc:line NCCL WARN message          (before 2.28: no func)
    host:pid:tid [dev] NCCL INFO misc/socket.cc:484 -> 6       (an error unwinding)
    [rank0]:[E1201 00:23:43.367 ProcessGroupNCCL.cpp:689] [PG ID 0 PG GUID 0(default_pg) Rank 0] ...

Ahead of any of them may stand a launcher's prefix: `[host:rank] ` (mldebug run),
`[rank3]:` (torch), `[1,3]<stderr>:` (Open MPI --tag-output), `[3] ` (MPICH -prepend-rank),
`3: ` (srun --label), and colour codes.
"""

from __future__ import annotations

import os
import shutil

from mldebug.files import picked, rundir, safeio
from mldebug.nccl import logformats as f
from mldebug.nccl.logfacts import (
    ERR_NCCL,
    RANK_BY_PATH,
    RANK_BY_PREFIX,
    FileLog,
    ProcLog,
    add_error,
    to_int,
)
from mldebug.nccl.logformats import prefixes
from mldebug.nccl.nccllines import read_nccl, read_version
from mldebug.nccl.torchtext import read_torch

CHUNK = (
    256 << 10
)  # bytes read at a time: small enough to stay in the CPU cache for every keyword pass
MAX_LINE = 4096  # NCCL itself cuts a line at 1024 bytes; torch's messages are longer
MAX_PROCS = 4096  # processes told apart in one file; more are one "others" bucket
PICK_BYTES = 8 << 20  # a bigger file read whole goes through grep first (files/picked.py)
WORDS = tuple(word.decode() for word in f.KEYWORDS)


def rank_of_path(path: str) -> int | None:
    """The rank a file's path names: ranks/<rank>/..., or rank3 / rank_3 in its name."""
    parts = path.replace("\\", "/").split("/")
    if len(parts) >= 3 and parts[-3] == "ranks":
        return rundir.parse_rank(parts[-2])
    match = f.PATH_RANK.search(parts[-1])
    return rundir.parse_rank(match.group("rank")) if match else None


class LogParser:
    """Feed it a file's bytes (`feed`, then `close`); read `procs` after."""

    def __init__(self, source: str, rank: int | None = None) -> None:
        self.source = source
        self.path_rank = rank
        self._procs: dict[tuple, ProcLog] = {}
        self._last: ProcLog | None = None  # who wrote the previous line looked at
        self._carry = b""
        self._skipping = False
        self.lines = 0
        self.cut_lines = 0
        self._pending_last_error: ProcLog | None = None
        self._bare_version: tuple | None = None  # "NCCL version X" without a prefix

    # ---- bytes -> lines -------------------------------------------------------------

    def feed(self, chunk: bytes) -> None:
        if self._skipping:  # in a line longer than MAX_LINE: drop bytes until it ends
            newline = chunk.find(b"\n")
            if newline == -1:
                return
            chunk = self._carry + b"\n" + chunk[newline + 1 :]
            self._carry, self._skipping = b"", False
        elif self._carry:
            chunk = self._carry + chunk
        end = chunk.rfind(b"\n") + 1
        if end:
            self.lines += chunk.count(b"\n", 0, end)
            self._scan(chunk, end)
        carry = chunk[end:]
        if len(carry) > MAX_LINE:
            carry = carry[:MAX_LINE]
            self._skipping = True
            self.cut_lines += 1
        self._carry = carry

    def close(self) -> list[ProcLog]:
        """The end of the file: its last line, even without a newline, then `snapshot()`."""
        if self._carry:  # the head of a line cut at MAX_LINE included
            self.lines += 1
            self._scan(self._carry + b"\n", len(self._carry) + 1)
        self._carry, self._skipping = b"", False
        return self.snapshot()

    def snapshot(self) -> list[ProcLog]:
        """The processes so far (a file still being written: its last, partial line waits)."""
        if self.path_rank is not None and not self._procs:  # a rank that said nothing
            self._proc(None, None, None)
        if self._bare_version:  # whose it is: the processes of this file that say none
            for proc in self._procs.values():
                if proc.nccl_lines and proc.nccl_version is None:
                    proc.nccl_version, proc.cuda_runtime = self._bare_version
        return self.procs

    @property
    def procs(self) -> list[ProcLog]:
        return list(self._procs.values())

    def _scan(self, data: bytes, end: int) -> None:
        starts = set()
        find, rfind = data.find, data.rfind
        if self._pending_last_error is not None:  # its line was the last of a chunk
            first = find(b"\n", 0, end)
            self._last_error(data[: first if first != -1 else end][:MAX_LINE])
        for word in f.KEYWORDS:
            at = find(word, 0, end)
            while at != -1:
                start = rfind(b"\n", 0, at) + 1
                starts.add(start)
                stop = find(b"\n", at, end)
                if stop == -1:
                    break
                at = find(word, stop, end)
        for start in sorted(starts):
            stop = find(b"\n", start, end)
            if stop == -1:
                stop = end
            if stop - start > MAX_LINE:
                self.cut_lines += 1
                stop = start + MAX_LINE
            line = data[start:stop]
            self._line(line)
            if self._pending_last_error is not None:  # "Last error:" then the error itself
                after = find(b"\n", stop + 1, end)
                if after != -1:
                    self._last_error(data[stop + 1 : after][:MAX_LINE])

    # ---- one line -------------------------------------------------------------------

    def _line(self, raw: bytes) -> None:
        if b"\x1b" in raw:
            raw = f.ANSI.sub(b"", raw)
        if b"\r" in raw:  # a progress bar redrawn: what a terminal shows last
            raw = raw.rstrip(b"\r").rsplit(b"\r", 1)[-1]
        text = raw.decode("utf-8", "replace")
        host, prefix_rank, pos = prefixes(text)
        glog = f.GLOG.match(text, pos)
        if glog:
            pos = glog.end()
        body = text[pos:]
        nccl = f.NCCL.match(body)
        if nccl is None and ("NCCL INFO" in body or "NCCL WARN" in body):
            nccl = f.NCCL.search(body)  # behind a prefix no launcher list names (a logger's)
        if nccl:
            proc = self._proc(nccl.group("host"), to_int(nccl.group("pid")), prefix_rank)
            proc.nccl_lines += 1
            read_nccl(proc, nccl)
            return
        proc = self._proc(host, None, prefix_rank)
        if body.startswith("NCCL version"):  # NCCL_DEBUG=VERSION, and NCCL 2.26+: no prefix
            read_version(proc, body)
            if not self._bare_version and proc.nccl_version:
                self._bare_version = (proc.nccl_version, proc.cuda_runtime)
            return
        if read_torch(proc, body):
            self._pending_last_error = proc

    def _proc(self, host: str | None, pid: int | None, prefix_rank: int | None) -> ProcLog:
        key: tuple  # ("pid", host, pid), ("rank", rank), ("file",) or ("others",)
        if pid is not None:
            key = ("pid", host, pid)
        elif prefix_rank is not None:
            key = ("rank", prefix_rank)
        else:
            key = ("file",)
        proc = self._procs.get(key)
        if proc is None:
            if len(self._procs) >= MAX_PROCS:
                key = ("others",)
                proc = self._procs.get(key)
            if proc is None:
                proc = ProcLog(self.source, host, pid)
                if self.path_rank is not None:
                    proc.claim_rank(self.path_rank, RANK_BY_PATH)
                self._procs[key] = proc
        if prefix_rank is not None:
            proc.claim_rank(prefix_rank, RANK_BY_PREFIX)
        if host and proc.host is None:
            proc.host = host
        self._last = proc
        return proc

    def _last_error(self, following: bytes) -> None:
        proc, self._pending_last_error = self._pending_last_error, None
        text = f.ANSI.sub(b"", following).decode("utf-8", "replace")
        text = text[prefixes(text)[2] :].strip()
        if text and proc is not None:
            add_error(proc, ERR_NCCL, f"last error: {text}")


def parse_bytes(data: bytes, source: str = "<bytes>", rank: int | None = None) -> list[ProcLog]:
    """The processes of a log given whole (tests, small texts)."""
    parser = LogParser(source, rank)
    for start in range(0, len(data), CHUNK):
        parser.feed(data[start : start + CHUNK])
    return parser.close()


def parse_file(
    path: str,
    rank: int | None = None,
    limit: int | None = None,
    tail: int | None = None,
) -> FileLog:
    """Read one file in one pass: all of it, its first `limit` bytes, or its last `tail`
    bytes (stderr, where the errors are). Never through a symlink, never blocking; a file
    that cannot be read comes back with `error` set."""
    rank = rank if rank is not None else rank_of_path(path)
    parser = LogParser(path, rank)
    read = 0
    truncated = False
    try:
        fd = safeio.open_regular(path)
    except OSError as error:
        return FileLog(path, [], error=error.strerror or str(error))
    try:
        size = os.fstat(fd).st_size
        if limit is None and tail is None and size > PICK_BYTES and shutil.which("grep"):
            return _parse_picked(fd, path, rank, size)
        if tail is not None:
            if size > tail:
                os.lseek(fd, size - tail, os.SEEK_SET)
                os.read(fd, 0)
                truncated = True
                skipped = os.read(fd, MAX_LINE)  # the first line was cut: start after it
                newline = skipped.find(b"\n")
                read += len(skipped)
                if newline != -1:
                    parser.feed(skipped[newline + 1 :])
        while True:
            want = CHUNK if limit is None else min(CHUNK, limit - read)
            if want <= 0:
                truncated = os.read(fd, 1) != b""
                break
            chunk = os.read(fd, want)
            if not chunk:
                break
            read += len(chunk)
            parser.feed(chunk)
    except OSError as error:
        return FileLog(path, parser.procs, read, parser.lines, error=error.strerror or str(error))
    finally:
        os.close(fd)
    procs = parser.close()
    return FileLog(path, procs, read, parser.lines, parser.cut_lines, truncated)


def _parse_picked(fd: int, path: str, rank: int | None, size: int) -> FileLog:
    """A big file read whole: grep hands on the lines that hold a keyword and the line
    after each (a "Last error:" line's error), the rest of the file costs grep's one pass
    in C, not a `bytes.find` per keyword (benchmarks/bench_commands.py, `nccl LOG`)."""
    parsers: list[LogParser] = []
    pending: list[bytes] = []

    def flush() -> None:
        if pending:
            parsers[0].feed(b"\n".join(pending) + b"\n")
            pending.clear()

    def sink(number: int, raw: bytes, hit: bool) -> None:
        pending.append(raw)
        if len(pending) >= 1024:
            flush()

    def start() -> picked.Sink:
        parsers[:] = [LogParser(path, rank)]
        pending.clear()
        return sink

    try:
        count = picked.pick(fd, path, WORDS, start, 0, 1)
        flush()
    except OSError as error:
        procs = parsers[0].procs if parsers else []
        return FileLog(path, procs, size, 0, error=error.strerror or str(error))
    parser = parsers[0]
    procs = parser.close()
    return FileLog(path, procs, size, count, parser.cut_lines)
