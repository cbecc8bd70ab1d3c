"""Safe file I/O for everything read from or written to a run directory.

Everything in a run directory is input, possibly planted by someone else: every file is
opened without following symlinks, read with a size cap, and refused unless it is a regular
file (a FIFO would block a read forever); a directory is used only when it is this user's
and nobody else can write to it. `files/rundir.py` says where the files are; this module is how
they are touched.

Stdlib only: the in-rank agent loads it by path (agent `_sibling`), as it does `files/rundir.py`.
"""

from __future__ import annotations

import errno
import json
import math
import os
import stat
import tempfile
import time
from pathlib import Path

MAX_JSON_BYTES = 4 << 20  # cap on a JSON file read (run.json for 1,024 ranks is ~150 KB)
MAX_JSON_DEPTH = 32  # run.json nests 4 deep; deeper is garbage (and a RecursionError risk)

_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_APPEND_FLAGS = (
    os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
)


class UntrustedDirError(OSError):
    """A directory mldebug would write to or read from that someone else controls."""


def check_private_dir(path: Path) -> None:
    """Raise UntrustedDirError unless `path` is a real directory (not a symlink) owned by
    this user that no one else can write to."""
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise UntrustedDirError(errno.ENOTDIR, "not a directory (a symlink or a file)", str(path))
    if info.st_uid != os.geteuid():
        raise UntrustedDirError(errno.EPERM, f"owned by uid {info.st_uid}, not you", str(path))
    if info.st_mode & 0o022:
        raise UntrustedDirError(
            errno.EPERM, f"writable by others (mode {stat.S_IMODE(info.st_mode):o})", str(path)
        )


def make_private_dir(path: Path) -> Path:
    """Create a directory (and parents) readable by this user only, or check that the one
    there is such a directory: an existing one someone else owns or can write is refused."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    check_private_dir(path)
    return path


def is_private_dir(path: str | os.PathLike) -> bool:
    """check_private_dir as a question: False for anything it refuses, or cannot look at."""
    try:
        check_private_dir(Path(path))
    except OSError:
        return False
    return True


def open_regular(path: str | os.PathLike) -> int:
    """A read-only descriptor of a regular file, never through a symlink and never blocking
    (a FIFO or device in its place raises OSError instead of hanging the reader)."""
    fd = os.open(path, _READ_FLAGS)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read_fd(fd: int, limit: int) -> bytes:
    chunks, left = [], limit
    while left > 0:
        data = os.read(fd, min(left, 1 << 20))
        if not data:
            break
        chunks.append(data)
        left -= len(data)
    return b"".join(chunks)


def read_fd(fd: int, limit: int) -> bytes:
    """At most `limit` bytes from a descriptor's current offset."""
    return _read_fd(fd, limit)


def read_head(path: str | os.PathLike, limit: int) -> bytes:
    """At most the first `limit` bytes of a regular file. Raises OSError."""
    fd = open_regular(path)
    try:
        return _read_fd(fd, limit)
    finally:
        os.close(fd)


def read_tail(path: str | os.PathLike, limit: int) -> tuple[bytes, int]:
    """At most the last `limit` bytes of a regular file, and the offset they start at.
    Raises OSError."""
    fd = open_regular(path)
    try:
        start = max(0, os.fstat(fd).st_size - limit)
        os.lseek(fd, start, os.SEEK_SET)
        return _read_fd(fd, limit), start
    finally:
        os.close(fd)


def json_depth_ok(value: object, limit: int = MAX_JSON_DEPTH) -> bool:
    """True when `value` nests no deeper than `limit` (checked level by level, without
    recursion, looking only at containers: a list of 300,000 small objects is quick)."""
    level = [value] if isinstance(value, (dict, list)) else []
    depth = 1
    while level:
        if depth > limit:
            return False
        deeper = []
        for item in level:
            for child in item.values() if isinstance(item, dict) else item:
                if isinstance(child, (dict, list)):
                    deeper.append(child)
        level, depth = deeper, depth + 1
    return True


def json_number(value: object) -> float | None:
    """A finite float from a JSON value read from a file; None for anything else (a string,
    true, NaN, 1e400, an integer too large for a float)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def read_json(path: str | os.PathLike, limit: int = MAX_JSON_BYTES) -> dict | None:
    """A JSON object from a file, or None when it is missing, not a regular file, larger
    than `limit`, nested too deep, or not a JSON object."""
    try:
        data = read_head(path, limit + 1)
    except OSError:
        return None
    if len(data) > limit:
        return None
    try:
        value = json.loads(data.decode("utf-8", errors="replace"))
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) and json_depth_ok(value) else None


def open_append(path: str | os.PathLike) -> int:
    """A descriptor to append to a regular file of this user's (created 0600), never
    through a symlink; a FIFO or device planted at the name is refused."""
    fd = os.open(path, _APPEND_FLAGS, 0o600)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def create_new(path: str | os.PathLike) -> int:
    """A descriptor of a file created by this call (0600): an existing name, a symlink
    included, is an error (FileExistsError), so nothing planted is ever written through."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)


def write_request(folder: Path, name: str) -> Path:
    """A fresh request file `folder/name` holding the time it was made: a new inode, renamed
    in place, so a request within the same clock tick as the last one is still news to a
    rank that compares inodes."""
    temp = folder / f".{name}.{os.getpid()}.tmp"
    fd = create_new(temp)
    try:
        os.write(fd, f"{time.time():.3f}\n".encode())
    finally:
        os.close(fd)
    os.replace(temp, folder / name)
    return folder / name


def write_json_atomic(path: Path, data: dict) -> None:
    """Write-then-rename so a reader never sees half a file. The temporary file is created
    exclusively under a random name, and rename replaces a symlink at `path` rather than
    writing through it."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(data, handle, indent=1, default=str)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
