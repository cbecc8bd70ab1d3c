"""Native stacks of every thread of a rank, or of a core file, with the real gdb.

gdb runs as `gdb --batch -nx` (no ~/.gdbinit, never interactive) in a session of its own,
with a time limit: past it gdb gets SIGTERM (it detaches from a live process as it quits),
then SIGKILL to its whole group; a rank a killed gdb left stopped is sent SIGCONT.

What gdb is asked is read-only: `info threads`, `thread apply all bt`, and, where CPython's
gdb extension is found for the rank's interpreter, `thread apply all py-bt` (it reads the
interpreter's memory; it calls nothing). No command makes the inferior run code (`call`,
`print f()`): such calls fail on some CPUs and can corrupt the process. debuginfod is off
(no network), auto-loaded scripts are off, frame arguments are not printed (cheaper, and
nothing of the rank's data comes out).
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from mldebug.collect import gdbparse
from mldebug.errors import ToolMissingError
from mldebug.files.procfs import proc_stat
from mldebug.model import (
    FAIL_ERROR,
    FAIL_EXITED,
    FAIL_PERMISSION,
    FAIL_TIMEOUT,
    Frame,
    NativeDump,
    NativeThread,
    RankTarget,
)

GDB_REMEDY = (
    "Install it: sudo apt-get install gdb (Debian, Ubuntu), sudo dnf install gdb (Fedora, "
    "RHEL), or point MLDEBUG_GDB at a gdb binary."
)
MAX_OUTPUT = 16 << 20  # bytes of gdb's output read; a huge process is cut, never read whole
MAX_NAMED_THREADS = 8192  # /proc/PID/task entries read for thread names
TERM_GRACE = 2.0  # seconds gdb gets to detach after SIGTERM before SIGKILL
# gdb runs under way (in readers' threads), ended by stop_all() on Ctrl-C
_RUNNING: set[subprocess.Popen] = set()
_STOPPED: set[subprocess.Popen] = set()
_RUNNING_LOCK = threading.Lock()

# Settings that keep gdb quiet, offline and cheap. Thread names, LWPs and function names
# stay; frame arguments (reading DWARF variables, printing the rank's data) go.
SETTINGS = (
    "set debuginfod enabled off",
    "set auto-load gdb-scripts off",
    "set auto-load python-scripts off",
    "set auto-load local-gdbinit off",
    "set pagination off",
    "set width 0",
    "set confirm off",
    "set print thread-events off",
    "set print frame-arguments none",
    "set print entry-values no",
    # Demangling every C++ symbol of libtorch as it loads is most of gdb's time on a torch
    # rank (benchmarks/bench_gdb.py): names stay mangled, and the few in the backtraces are
    # demangled afterwards (`demangle_names`).
    "set demangle-style none",
)
MAX_DEMANGLED = 4096  # distinct names demangled per reading
_MANGLED = re.compile(r"^_Z[A-Za-z0-9_.$]{1,4000}$")


def find_gdb() -> str:
    """$MLDEBUG_GDB, else gdb on PATH."""
    chosen = os.environ.get("MLDEBUG_GDB")
    if chosen:
        if os.access(chosen, os.X_OK) and os.path.isfile(chosen):
            return chosen
        raise ToolMissingError(
            f"MLDEBUG_GDB={chosen} is not an executable file", "Point it at gdb, or unset it."
        )
    found = shutil.which("gdb")
    if found:
        return found
    raise ToolMissingError("gdb is not installed (mldebug reads native stacks with it)", GDB_REMEDY)


def _trusted_script(path: Path) -> bool:
    """A script gdb may source: a regular file (no symlink followed at its last step), owned
    by root or by us, writable by nobody else."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return (
        stat.S_ISREG(info.st_mode)
        and info.st_uid in (0, os.getuid())
        and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
    )


def python_extension(executable: str | None) -> tuple[str | None, str]:
    """CPython's gdb extension (`python3.X-gdb.py`, `libpython3.X.so.1.0-gdb.py`) for an
    interpreter, and a note: why py-bt is not available when it is not found."""
    if not executable:
        return None, "py-bt: the rank's executable is unknown"
    exe = Path(os.path.realpath(executable))
    named = re.search(r"python(\d+\.\d+)", exe.name)  # the rank's Python, not ours
    version = named.group(1) if named else f"{sys.version_info.major}.{sys.version_info.minor}"
    names = [exe.name + "-gdb.py", f"python{version}-gdb.py"]
    places = [exe.parent / name for name in names]
    for libdir in (exe.parent.parent / "lib", Path("/usr/lib/x86_64-linux-gnu"), Path("/usr/lib")):
        lib = f"libpython{version}.so.1.0"
        places.append(libdir / f"{lib}-gdb.py")
        places.append(Path("/usr/share/gdb/auto-load") / libdir.relative_to("/") / f"{lib}-gdb.py")
    places.append(Path("/usr/share/gdb/auto-load") / exe.relative_to("/").parent / names[0])
    for place in places:
        if _trusted_script(place):
            return str(place), ""
    return None, (
        f"py-bt not available: no CPython gdb extension found for {exe} (Debian: apt-get "
        f"install python{version}-dbg for the system Python; pyenv and python.org builds ship "
        "python3.X-gdb.py beside the interpreter); Python frames come from py-spy only"
    )


def gdb_command(gdb: str, target: list[str], marker: str, extension: str | None) -> list[str]:
    """The command line: settings, the target (`-p PID` or `EXE CORE`), then each section
    after a marker line."""
    command = [gdb, "--batch", "-nx", "-q"]
    for setting in SETTINGS:
        command += ["-iex", setting]
    command += target

    def section(name: str, *commands: str) -> None:
        command.extend(["-ex", f"echo \\n{marker} {name}\\n"])
        for line in commands:
            command.extend(["-ex", line])

    section("threads", "info threads")
    section("bt", "thread apply all bt")
    if extension:
        section("pybt", f"source {extension}", "thread apply all py-bt")
    section("end")  # a core is asked the same: its crashing thread is gdb's current one
    return command


def _end_group(popen: subprocess.Popen) -> None:
    """SIGTERM (gdb detaches as it quits), then SIGKILL to gdb's whole session."""
    for signum, wait in ((signal.SIGTERM, TERM_GRACE), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(popen.pid, signum)
        except (ProcessLookupError, PermissionError):
            return
        try:
            popen.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def stop_all() -> None:
    """Ctrl-C: end every gdb run under way (SIGTERM: gdb detaches as it quits; its reader
    resumes a rank left stopped), so that no reader thread holds up the exit for its
    timeout."""
    with _RUNNING_LOCK:
        running = list(_RUNNING)
        _STOPPED.update(running)
    for popen in running:
        try:
            os.killpg(popen.pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass


def run_gdb(command: list[str], timeout: float, pid: int | None = None) -> tuple[str, bool]:
    """gdb's output (at most MAX_OUTPUT bytes, stdout and stderr together) and whether it
    ran out of time. A live rank a killed gdb left stopped is resumed, unless it was
    stopped before gdb came (someone else's SIGSTOP is theirs)."""
    before = proc_stat(pid) if pid is not None else None
    stopped_before = before is not None and bool(before) and before[0] in ("T", "t")
    with tempfile.TemporaryFile() as out:
        popen = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "LC_ALL": "C"},
        )
        with _RUNNING_LOCK:
            _RUNNING.add(popen)
        timed_out = False
        try:
            popen.wait(timeout=timeout)
        except BaseException as error:  # out of time, or Ctrl-C: gdb never outlives the call
            if not isinstance(error, subprocess.TimeoutExpired):
                _end_group(popen)
                raise
            timed_out = True
        finally:
            with _RUNNING_LOCK:
                _RUNNING.discard(popen)
                stopped = popen in _STOPPED
                _STOPPED.discard(popen)
        if timed_out or stopped:  # ended by us: it may have left the rank stopped
            timed_out = True
            _end_group(popen)
            if pid is not None and not stopped_before:
                fields = proc_stat(pid)
                if fields and fields[0] in ("T", "t"):
                    os.kill(pid, signal.SIGCONT)
        out.seek(0)
        data = out.read(MAX_OUTPUT)
    return data.decode("utf-8", errors="replace"), timed_out


def demangle_names(gdb: str, names: Iterable[str], timeout: float = 30.0) -> dict[str, str]:
    """Itanium-mangled C++ names -> demangled, by gdb's own demangler, in one quick gdb run
    (no process attached). Names that are not plainly mangled are left out."""
    wanted = sorted({n for n in names if _MANGLED.match(n)})[:MAX_DEMANGLED]
    if not wanted:
        return {}
    marker = f"@@mldebug-{secrets.token_hex(8)}"
    command = [gdb, "--batch", "-nx", "-q", "-iex", "set debuginfod enabled off"]
    for index, name in enumerate(wanted):
        command += ["-ex", f"echo {marker} {index}\\n", "-ex", f"demangle -l c++ -- {name}"]
    try:
        done = subprocess.run(
            command,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout,
            env={**os.environ, "LC_ALL": "C"},
        )
    except (subprocess.TimeoutExpired, OSError):
        return {}
    found: dict[str, str] = {}
    current = None
    for line in done.stdout[:MAX_OUTPUT].decode("utf-8", "replace").splitlines():
        if line.startswith(marker + " "):
            said = line[len(marker) + 1 :].strip()
            current = wanted[int(said)] if said.isdigit() and int(said) < len(wanted) else None
        elif current is not None and line.strip() and current not in found:
            found[current] = line.strip()[: gdbparse.MAX_LINE]
    return found


def demangled(gdb: str, threads: tuple[NativeThread, ...]) -> tuple[NativeThread, ...]:
    """The threads with their mangled C++ frame names demangled (and cut to the name)."""
    names = demangle_names(gdb, {f.function for t in threads for f in t.frames})
    if not names:
        return threads

    def frame(f: Frame) -> Frame:
        if f.function not in names:
            return f
        return replace(f, function=gdbparse.short_function(names[f.function]))

    return tuple(replace(t, frames=tuple(frame(f) for f in t.frames)) for t in threads)


def thread_names(pid: int) -> dict[int, str]:
    """TID -> /proc/PID/task/TID/comm (what pthread_setname_np set: pt_gloo_runloop...)."""
    names: dict[int, str] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return names
    for tid in tids[:MAX_NAMED_THREADS]:
        if not tid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/task/{tid}/comm", "rb") as file:
                names[int(tid)] = file.read(64).decode("utf-8", "replace").rstrip("\n")
        except OSError:
            continue
    return names


def threads_of(
    text: str, marker: str, names: dict[int, str] | None = None, core: bool = False
) -> tuple[tuple[NativeThread, ...], bool]:
    """The threads in gdb's output, and whether py-bt ran. In a core, gdb's current thread
    is the one that received the fatal signal: it is marked crashed."""
    parts = gdbparse.sections(text, marker)
    current = gdbparse.current_thread(parts.get("threads", "")) if core else None
    python = gdbparse.parse_python_backtraces(parts.get("pybt", ""))
    threads = []
    for parsed in gdbparse.parse_backtraces(parts.get("bt", "")):
        name = (names or {}).get(parsed.lwp or -1) or parsed.name
        threads.append(
            NativeThread(
                lwp=parsed.lwp or 0,
                name=name,
                frames=parsed.frames,
                python_frames=python.get(parsed.number, ()),
                crashed=current is not None and current[0] == parsed.number,
            )
        )
    threads.sort(key=lambda t: t.lwp)
    return tuple(threads), "pybt" in parts


def classify_attach_error(text: str) -> tuple[str, str] | None:
    """(FAIL_*, detail) when gdb could not attach, from what it said."""
    lowered = text.lower()
    if "ptrace: operation not permitted" in lowered or "could not attach" in lowered:
        return FAIL_PERMISSION, "ptrace refused: gdb could not attach"
    if "ptrace: no such process" in lowered:
        return FAIL_EXITED, "the process exited"
    return None


def read_process(
    gdb: str, target: RankTarget, timeout: float = 60.0, rank: int | None = None
) -> NativeDump:
    """Every thread of one live rank. Never raises for the rank's own trouble."""
    pid = target.pid
    try:
        executable = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        executable = None
    extension, note = python_extension(executable)
    marker = f"@@mldebug-{secrets.token_hex(8)}"
    names = thread_names(pid)
    started = time.monotonic()
    text, timed_out = run_gdb(
        gdb_command(gdb, ["-p", str(pid)], marker, extension), timeout, pid=pid
    )
    took = time.monotonic() - started
    base = NativeDump(rank=rank, pid=pid, executable=executable, seconds=took)
    if timed_out:
        return _failed(base, FAIL_TIMEOUT, f"gdb did not answer within {timeout:g}s")
    threads, python_bt = threads_of(text, marker, names)
    threads = demangled(gdb, threads)
    if not threads:
        failure = classify_attach_error(text) or (FAIL_ERROR, _first_error(text))
        if failure[0] != FAIL_PERMISSION and proc_stat(pid) is None:
            failure = (FAIL_EXITED, "the process exited")
        return _failed(base, *failure)
    return NativeDump(
        rank=rank,
        pid=pid,
        threads=threads,
        executable=executable,
        python_bt=python_bt,
        notes=() if python_bt else (note,),
        seconds=took,
    )


def read_core(
    gdb: str, core: str, executable: str, rank: int | None = None, timeout: float = 120.0
) -> tuple[NativeDump, str]:
    """Every thread of a core file as `executable` explains it, and gdb's own words (the
    caller checks them for a mismatch)."""
    extension, note = python_extension(executable)
    marker = f"@@mldebug-{secrets.token_hex(8)}"
    started = time.monotonic()
    text, timed_out = run_gdb(gdb_command(gdb, [executable, core], marker, extension), timeout)
    took = time.monotonic() - started
    base = NativeDump(rank=rank, pid=None, core=core, executable=executable, seconds=took)
    if timed_out:
        return _failed(base, FAIL_TIMEOUT, f"gdb did not answer within {timeout:g}s"), text
    threads, python_bt = threads_of(text, marker, core=True)
    threads = demangled(gdb, threads)
    prelude = gdbparse.sections(text, marker).get("", "")
    dump = NativeDump(
        rank=rank,
        pid=None,
        threads=threads,
        core=core,
        executable=executable,
        signal=gdbparse.terminating_signal(prelude),
        python_bt=python_bt,
        notes=() if python_bt else (note,),
        seconds=took,
    )
    if not threads:
        return _failed(dump, FAIL_ERROR, _first_error(prelude or text)), text
    return dump, prelude


def _failed(dump: NativeDump, failure: str, detail: str) -> NativeDump:
    return replace(dump, failure=failure, failure_detail=detail)


def _first_error(text: str) -> str:
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("[", "Using host", "@@mldebug")):
            return "gdb: " + line[:300]
    return "gdb printed no threads"
