"""Read a Chrome trace (torch.profiler's JSON, plain or gzipped) one event at a time.

A trace of a long profile is gigabytes of JSON; `json.load` holds all of it, several times
over, as Python objects. `TraceStream` decodes one value at a time from a bounded buffer
(`json.JSONDecoder.raw_decode` over a sliding window), so memory is the window plus one
event, whatever the file's size. Both shapes of the format are read: the object form
(`{"traceEvents": [...], "distributedInfo": {...}, ...}`, the keys in any order) and the
bare array of events. The file is opened without following a symlink, never blocking.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

from mldebug.files import safeio

CHUNK = 1 << 20  # characters decoded per read
MAX_VALUE = 16 << 20  # one event, or one metadata value, at most (characters)
MAX_CHARS = 8 << 30  # a trace is read this far at most; `TraceStream.cut` says so
GZIP_MAGIC = b"\x1f\x8b"
_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


class TraceError(ValueError):
    """A file that is not a readable trace: one line, said to the user."""


@contextmanager
def open_trace(path: str | os.PathLike) -> Iterator[IO[str]]:
    """The file's text, gunzipped when it is gzip; a symlink or a non-regular file raises
    OSError (safeio.open_regular). Closes the file (gzip leaves it open) on leaving."""
    with os.fdopen(safeio.open_regular(path), "rb") as raw:
        if raw.peek(2)[:2] == GZIP_MAGIC:
            with gzip.GzipFile(fileobj=raw, mode="rb") as unzipped:
                yield io.TextIOWrapper(unzipped, encoding="utf-8", errors="replace")
        else:
            yield io.TextIOWrapper(raw, encoding="utf-8", errors="replace")


class TraceStream:
    """The events of one trace, in file order; `meta` holds every top-level key but
    `traceEvents` (complete once the events are read: a key may follow them)."""

    def __init__(self, text: IO[str], max_chars: int = MAX_CHARS) -> None:
        self._text = text
        self._buf = ""
        self._pos = 0
        self._eof = False
        self._read = 0
        self._max = max_chars
        self.meta: dict[str, Any] = {}
        self.cut = False  # stopped at max_chars: the rest of the file was not read
        self.has_events = False  # the document holds a list of events (or is one)

    # -- the window ---------------------------------------------------------------------
    def _fill(self) -> bool:
        if self._eof:
            return False
        try:
            data = self._text.read(CHUNK)
        except EOFError:
            raise TraceError("the gzip stream ends early (a truncated file?)") from None
        except (gzip.BadGzipFile, zlib.error, OSError) as error:
            raise TraceError(f"not readable as gzip ({error})") from None
        if self._read >= self._max:
            self.cut, data = True, ""
        if not data:
            self._eof = True
            return False
        self._read += len(data)
        self._buf = self._buf[self._pos :] + data
        self._pos = 0
        return True

    def _skip(self) -> str:
        """Skip white space; the next character, "" at the end."""
        while True:
            self._pos = _WS.match(self._buf, self._pos).end()  # type: ignore[union-attr]
            if self._pos < len(self._buf) or not self._fill():
                return self._buf[self._pos : self._pos + 1]

    def _expect(self, chars: str) -> str:
        char = self._skip()
        if not char or char not in chars:
            said = "the file ends" if not char else f"{char!r} comes"
            raise TraceError(
                f"not a Chrome trace: {' or '.join(map(repr, chars))} expected, {said}"
            )
        self._pos += 1
        return char

    def _value(self) -> Any:
        self._skip()
        while True:
            try:
                value, end = _DECODER.raw_decode(self._buf, self._pos)
            except json.JSONDecodeError as error:
                if self._eof:
                    ended = error.pos >= len(self._buf.rstrip()) or "Unterminated" in error.msg
                    raise TraceError(
                        "the JSON ends early (a truncated file?)"
                        if ended or self.cut
                        else f"not JSON: {error.msg} (character {self._read - len(self._buf) + error.pos})"
                    ) from None
            except RecursionError:
                raise TraceError("not a Chrome trace: JSON nested too deep") from None
            else:
                # a number at the window's end may go on in the next chunk
                if end < len(self._buf) or self._eof:
                    self._pos = end
                    return value
            if len(self._buf) - self._pos > MAX_VALUE:
                raise TraceError(f"one JSON value is over {MAX_VALUE >> 20} MiB: not a trace event")
            self._fill()

    # -- the document -------------------------------------------------------------------
    def events(self) -> Iterator[dict]:
        try:
            if self._expect("{[") == "[":
                self.has_events = True
                yield from self._array()
            else:
                yield from self._object()
            if self._skip() and not self.cut:
                raise TraceError("not a Chrome trace: more after the JSON document")
        except TraceError:
            if not self.cut:  # past max_chars: what was read is what there is
                raise

    def _array(self) -> Iterator[dict]:
        if self._skip() == "]":
            self._pos += 1
            return
        while True:
            value = self._value()
            if isinstance(value, dict):
                yield value
            if self._expect(",]") == "]":
                return

    def _object(self) -> Iterator[dict]:
        if self._skip() == "}":
            self._pos += 1
            return
        while True:
            key = self._value()
            if not isinstance(key, str):
                raise TraceError("not a Chrome trace: an object key that is not a string")
            self._expect(":")
            if key == "traceEvents":
                self._expect("[")
                self.has_events = True
                yield from self._array()
            else:
                self.meta[key] = self._value()
            if self.cut:
                return
            if self._expect(",}") == "}":
                return


def looks_like_trace(head: bytes) -> bool:
    """Does a file's first bytes (gunzipped where gzip) read like a Chrome trace?"""
    text = head.lstrip()
    if text.startswith(b"["):
        return b'"ph"' in text[:4096] and b'"ts"' in text[:4096]
    return text.startswith(b"{") and (
        b'"traceEvents"' in text or b'"schemaVersion"' in text or b'"distributedInfo"' in text
    )


def head_of(path: str | os.PathLike, limit: int = 64 << 10) -> bytes:
    """The first `limit` bytes of a file, gunzipped when it is gzip (b"" when a gzip
    stream is broken right away). Raises OSError."""
    data = safeio.read_head(path, limit)
    if not data.startswith(GZIP_MAGIC):
        return data
    try:
        return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(data, limit)
    except zlib.error:
        return b""
