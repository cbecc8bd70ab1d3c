"""Core files: what a core says about itself, where the kernel puts them, and which rank.

`core_info` reads an ELF core's notes (bounded reads, no gdb): the process id, the signal,
the thread that received it (the kernel writes the dumping thread's NT_PRSTATUS first),
the command line, the executable (the NT_FILE mapping that holds the program's entry
point) and the rank environment (RANK=... strings at the top of the main thread's stack).

`core_plan` explains /proc/sys/kernel/core_pattern: a pipe to a handler (systemd-coredump,
apport) keeps the file itself, and the plan says which command gets it; a path pattern
(`core`, `core.%p`, `/var/crash/core.%e.%p`) is where `find_core` looks for a rank's core.
Nothing here follows a symlink or trusts a path or a number read from a core.
"""

from __future__ import annotations

import os
import re
import resource
import signal
import stat
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from mldebug.files.rundir import hostname
from mldebug.files.safeio import make_private_dir, open_regular

CORE_PATTERN = "/proc/sys/kernel/core_pattern"
CORE_USES_PID = "/proc/sys/kernel/core_uses_pid"
MAX_NOTES = 4 << 20  # bytes of PT_NOTE read
MAX_PHDRS = 65535
ENV_WINDOW = 256 << 10  # bytes below the program's file name where its environment lies
# Signals whose default action dumps core (signal(7)).
CORE_SIGNALS = frozenset(
    int(s)
    for s in (
        signal.SIGABRT,
        signal.SIGSEGV,
        signal.SIGBUS,
        signal.SIGFPE,
        signal.SIGILL,
        signal.SIGQUIT,
        signal.SIGSYS,
        signal.SIGTRAP,
        signal.SIGXCPU,
        signal.SIGXFSZ,
    )
)
RANK_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK")

_NT_PRSTATUS, _NT_PRPSINFO, _NT_AUXV, _NT_FILE = 1, 3, 6, 0x46494C45
_AT_ENTRY, _AT_EXECFN = 9, 31
_PT_LOAD, _PT_NOTE = 1, 4


class NotACoreError(ValueError):
    """The file is not a readable ELF core file."""


@dataclass(frozen=True)
class CoreInfo:
    pid: int | None = None
    signal: int | None = None
    crashed_tid: int | None = None
    command: str = ""  # the first 80 bytes of the command line (NT_PRPSINFO)
    executable: str | None = None  # as the crashed process mapped it
    environment: dict[str, str] = field(default_factory=dict)  # RANK_VARIABLES found
    mtime: float = 0.0  # when the core was written

    @property
    def signal_name(self) -> str | None:
        return signal_name(self.signal)

    @property
    def rank(self) -> int | None:
        for name in ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK"):
            value = self.environment.get(name, "")
            if value.isdigit():
                return int(value)
        return None


def signal_name(number: int | None) -> str | None:
    if not number:
        return None
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _read_at(fd: int, offset: int, size: int) -> bytes:
    return os.pread(fd, size, offset) if size > 0 and offset >= 0 else b""


def _notes(data: bytes) -> Iterator[tuple[int, bytes, bytes]]:
    """(type, name, descriptor) of each ELF note."""
    offset = 0
    while offset + 12 <= len(data):
        namesz, descsz, kind = struct.unpack_from("<III", data, offset)
        offset += 12
        name = data[offset : offset + namesz].rstrip(b"\0")
        offset += (namesz + 3) & ~3
        desc = data[offset : offset + descsz]
        offset += (descsz + 3) & ~3
        yield kind, name, desc


def _nt_file(desc: bytes) -> list[tuple[int, int, str]]:
    """NT_FILE: (start, end, path) of each file mapping."""
    if len(desc) < 16:
        return []
    count, _page = struct.unpack_from("<QQ", desc, 0)
    count = min(count, (len(desc) - 16) // 24)
    ranges = [struct.unpack_from("<QQQ", desc, 16 + 24 * i) for i in range(count)]
    names = desc[16 + 24 * count :].split(b"\0")
    return [
        (start, end, names[i].decode("utf-8", "replace"))
        for i, (start, end, _) in enumerate(ranges)
        if i < len(names)
    ]


def _environment(fd: int, loads: list[tuple[int, int, int]], execfn: int | None) -> dict:
    """The rank variables among the environment strings just below AT_EXECFN."""
    if not execfn:
        return {}
    for vaddr, offset, filesz in loads:
        if vaddr <= execfn < vaddr + filesz:
            start = max(vaddr, execfn - ENV_WINDOW)
            data = _read_at(fd, offset + (start - vaddr), execfn - start)
            found = {}
            for name in RANK_VARIABLES:
                match = re.search(rb"\0" + name.encode() + rb"=([0-9]{1,9})\0", data)
                if match:
                    found[name] = match.group(1).decode()
            return found
    return {}


def core_info(path: str | os.PathLike) -> CoreInfo:
    """What an ELF core file says about its process. Raises NotACoreError, OSError."""
    fd = open_regular(path)
    try:
        header = _read_at(fd, 0, 64)
        if len(header) < 64 or header[:4] != b"\x7fELF" or header[4] != 2 or header[5] != 1:
            raise NotACoreError("not a 64-bit little-endian ELF file")
        (e_type,) = struct.unpack_from("<H", header, 16)
        if e_type != 4:  # ET_CORE
            raise NotACoreError("an ELF file, but not a core dump")
        (phoff,) = struct.unpack_from("<Q", header, 32)
        phentsize, phnum = struct.unpack_from("<HH", header, 54)
        if phentsize != 56 or phnum > MAX_PHDRS:
            raise NotACoreError("unexpected ELF program headers")
        table = _read_at(fd, phoff, phentsize * phnum)
        loads, notes = [], b""
        for index in range(len(table) // 56):
            p_type, _flags, offset, vaddr, _paddr, filesz = struct.unpack_from(
                "<IIQQQQ", table, index * 56
            )
            if p_type == _PT_LOAD:
                loads.append((vaddr, offset, filesz))
            elif p_type == _PT_NOTE and not notes:
                notes = _read_at(fd, offset, min(filesz, MAX_NOTES))
        info = _from_notes(notes)
        return CoreInfo(
            pid=info["pid"],
            signal=info["signal"],
            crashed_tid=info["tid"],
            command=info["command"],
            executable=info["executable"],
            environment=_environment(fd, loads, info["execfn"]),
            mtime=os.fstat(fd).st_mtime,
        )
    finally:
        os.close(fd)


def _from_notes(notes: bytes) -> dict:
    found = {"pid": None, "signal": None, "tid": None, "command": "", "executable": None}
    found["execfn"] = None
    entry, files = None, []
    for kind, name, desc in _notes(notes):
        if name != b"CORE":
            continue
        if kind == _NT_PRSTATUS and found["tid"] is None and len(desc) >= 36:
            (found["signal"],) = struct.unpack_from("<h", desc, 12)
            (found["tid"],) = struct.unpack_from("<i", desc, 32)
        elif kind == _NT_PRPSINFO and len(desc) >= 136:
            (found["pid"],) = struct.unpack_from("<i", desc, 24)
            found["command"] = desc[56:136].split(b"\0")[0].decode("utf-8", "replace").strip()
        elif kind == _NT_AUXV:
            for i in range(len(desc) // 16):
                key, value = struct.unpack_from("<QQ", desc, 16 * i)
                if key == _AT_ENTRY:
                    entry = value
                elif key == _AT_EXECFN:
                    found["execfn"] = value
        elif kind == _NT_FILE:
            files = _nt_file(desc)
    if entry is not None:
        found["executable"] = next((p for s, e, p in files if s <= entry < e), None)
    return found


# ---- where the kernel writes cores -------------------------------------------------------


@dataclass(frozen=True)
class CorePlan:
    pattern: str
    piped: bool  # core_pattern starts with "|": a handler program receives the core
    handler: str = ""  # systemd-coredump, apport, or the program's path
    uses_pid: bool = False  # core_uses_pid: ".PID" appended to a pattern without %p

    def fetch_command(self, pid: int | None, out: str = "core") -> str:
        """How to get a piped core back as a file."""
        who = str(pid) if pid else "PID"
        if "systemd-coredump" in self.handler:
            return f"coredumpctl dump {who} --output={out}"
        if "apport" in self.handler:
            return f"apport-unpack /var/crash/<the .crash file of pid {who}> DIR (DIR/CoreDump)"
        return f"ask the core handler {self.handler} for the core of pid {who}"

    def explain(self) -> str:
        if self.piped:
            return (
                f"kernel.core_pattern pipes cores to {self.handler}: the file stays with it; "
                f"get it with: {self.fetch_command(None)}"
            )
        return f"kernel.core_pattern is {self.pattern!r}: cores are written there"


def _read_small(path: str) -> str:
    try:
        with open(path, "rb") as file:
            return file.read(4096).decode("utf-8", "replace").strip()
    except OSError:
        return ""


def core_plan(pattern: str | None = None, uses_pid: bool | None = None) -> CorePlan:
    pattern = _read_small(CORE_PATTERN) if pattern is None else pattern
    if uses_pid is None:
        uses_pid = _read_small(CORE_USES_PID) == "1"
    pattern = pattern or "core"
    if pattern.startswith("|"):
        program = pattern[1:].strip().split(" ")[0]
        return CorePlan(pattern, True, handler=os.path.basename(program) or program)
    return CorePlan(pattern, False, uses_pid=uses_pid)


_SPECIFIERS = re.compile(r"%(.)")


def expected_names(plan: CorePlan, pid: int, comm: str = "") -> tuple[str, re.Pattern] | None:
    """(directory, file-name regex) where `plan` puts the core of `pid`; None for a pipe or
    a pattern whose directory part depends on the crash."""
    if plan.piped:
        return None
    pattern = plan.pattern
    if plan.uses_pid and "%p" not in pattern and "%P" not in pattern:
        pattern += ".%p"
    head, _, tail = pattern.rpartition("/")
    if "%" in head:
        return None
    known = {"p": str(pid), "P": str(pid), "e": comm, "h": hostname(), "u": str(os.getuid())}
    known["g"] = str(os.getgid())
    parts, last = [], 0
    for match in _SPECIFIERS.finditer(tail):
        parts.append(re.escape(tail[last : match.start()]))
        letter = match.group(1)
        if letter == "%":
            parts.append("%")
        elif letter in known and known[letter]:
            parts.append(re.escape(known[letter]))
        else:
            parts.append(r".{0,255}?")
        last = match.end()
    parts.append(re.escape(tail[last:]))
    return head, re.compile("".join(parts) + r"\Z")


def find_core(plan: CorePlan, pid: int, cwd: str, since: float, comm: str = "") -> Path | None:
    """The core file `pid` left under `plan`: a regular file of ours, written after `since`,
    whose own notes name `pid`. Directories are listed, never searched recursively."""
    expected = expected_names(plan, pid, comm)
    if expected is None:
        return None
    head, name = expected
    folder = Path(head) if head.startswith("/") else Path(cwd) / head
    try:
        entries = os.listdir(folder)[:100_000]
    except OSError:
        return None
    for entry in sorted(entries):
        if not name.match(entry):
            continue
        path = folder / entry
        try:
            info = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or info.st_mtime < since:
            continue
        try:
            if core_info(path).pid == pid:
                return path
        except (OSError, ValueError):
            continue
    return None


def keep_core(path: Path, cores_dir: Path, rank: int, pid: int) -> Path:
    """Move a rank's core into the run's cores/ as rank<N>.<pid>.core (a rename: same
    filesystem only); where it cannot move, it stays where it is."""
    make_private_dir(cores_dir)
    target = cores_dir / f"rank{rank}.{pid}.core"
    try:
        os.rename(path, target)
    except OSError:
        return path
    return target


def raise_core_limit() -> None:
    """In a rank, before exec: let it dump core (soft RLIMIT_CORE up to the hard limit)."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
    resource.setrlimit(resource.RLIMIT_CORE, (hard, hard))


def core_limit_note() -> str | None:
    """Why cores cannot be written, when the hard limit forbids them."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_CORE)
    if hard == 0:
        return "the hard core size limit is 0 (ulimit -Hc): ranks cannot dump core"
    return None


RANK_IN_NAME = re.compile(r"rank[._-]?(\d{1,7})", re.IGNORECASE)


def rank_from_name(path: str | os.PathLike) -> int | None:
    match = RANK_IN_NAME.search(os.path.basename(os.fspath(path)))
    return int(match.group(1)) if match else None
