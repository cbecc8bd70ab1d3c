"""The guardian: ends a job whose `mldebug run` was killed outright (SIGKILL, the OOM killer).

A killed `mldebug run` cannot stop its job. The kernel's parent-death signal (PDEATHSIG,
see procs.py) sends each rank SIGTERM, but a rank may catch or ignore it, and the rank's own
children get nothing. So the supervisor starts this small process first, in a session of
its own (the job's signals and the terminal's Ctrl-C do not reach it), and keeps the write
end of a pipe to it; nothing else holds that end. Over it the guardian learns, line by line:

    group PGID TICKS   a process group the supervisor started (its leader's start time)
    proc PID TICKS     a process to end by itself (a wrapped launcher's verified rank)
    done               the supervisor finished: exit without doing anything

End of file without "done" means the supervisor died. The guardian then sends SIGTERM to
what is left of the job, waits the grace period, sends SIGKILL to what is still there, and
marks run.json "interrupted" with a reason (unless the supervisor wrote a final status).

Only processes of this job are signalled, each verified first by pid *and* start time:
  * a group while its leader is the process that was started (alive or a zombie), or while
    a member seen in the group earlier (by the scan below) is still in it;
  * every descendant of the job's processes, found by a scan of /proc every SCAN_INTERVAL
    seconds while the job runs: this covers children that left the job's groups
    (setsid/setpgid), which a signal to a group does not reach. A process started and
    detached less than SCAN_INTERVAL before mldebug run died can be missed; one whose
    parent had already exited when it was first seen cannot be told from a stranger.

Run as `python -I -c ... PACKAGE_PARENT RUN_DIR GRACE SUPERVISOR_PID` (see `start`): stdlib
and mldebug.files.rundir only, so it starts fast.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

SCAN_INTERVAL = 1.0

_BOOT = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    "from mldebug.launch.guardian import main; sys.exit(main(sys.argv[2:]))"
)


class GuardianLink:
    """The supervisor's end: tell the guardian what to look after, and when all is done."""

    def __init__(self, popen: subprocess.Popen, write_fd: int) -> None:
        self.popen = popen
        self._fd: int | None = write_fd

    @classmethod
    def start(cls, run_dir: Path, grace: float) -> GuardianLink:
        package_parent = str(Path(__file__).resolve().parent.parent.parent)
        read_fd, write_fd = os.pipe()  # neither end is inherited by anything but the guardian
        try:
            popen = subprocess.Popen(
                [sys.executable, "-I", "-c", _BOOT, package_parent, str(run_dir), f"{grace:g}"]
                + [str(os.getpid())],
                stdin=read_fd,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        except BaseException:
            os.close(write_fd)
            raise
        finally:
            os.close(read_fd)
        return cls(popen, write_fd)

    def watch_group(self, pgid: int, ticks: int | None) -> None:
        self._send(f"group {pgid} {ticks if ticks is not None else '-'}\n")

    def watch_process(self, pid: int, ticks: int) -> None:
        self._send(f"proc {pid} {ticks}\n")

    def done(self) -> None:
        """The job is over and accounted for: the guardian exits doing nothing."""
        self._send("done\n")
        self.close()
        try:
            self.popen.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _send(self, line: str) -> None:
        if self._fd is None:
            return
        try:
            os.write(self._fd, line.encode("ascii"))  # short lines: one atomic write each
        except OSError:
            self.close()  # the guardian is gone: the job runs on without it


def start_guardian(run_dir: Path, grace: float, say: Callable[[str], None]) -> GuardianLink | None:
    """The guardian of a job about to start, or None (said in one line) where it cannot run."""
    try:
        return GuardianLink.start(run_dir, grace)
    except OSError as error:
        say(
            f"mldebug: could not start the guardian ({error}): should mldebug run be "
            "killed with SIGKILL, processes of the job that ignore SIGTERM may run on"
        )
        return None


# -- the guardian process --------------------------------------------------------------


def _snapshot() -> dict[int, tuple[int, int, int, str]]:
    """pid -> (ppid, pgid, start ticks, state) of every process: one pass over /proc."""
    from mldebug.files.procfs import proc_stat

    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        fields = proc_stat(int(name))
        if fields is None:
            continue
        try:
            table[int(name)] = (int(fields[1]), int(fields[2]), int(fields[19]), fields[0])
        except (TypeError, ValueError, IndexError):
            continue
    return table


class Job:
    """What the guardian knows of the job, and how it ends it."""

    def __init__(self) -> None:
        self.groups: dict[int, int | None] = {}  # pgid -> leader's start ticks
        self.roots: dict[int, int] = {}  # pid -> start ticks (wrapped ranks)
        self.known: dict[int, tuple[int, int]] = {}  # pid -> (start ticks, pgid), from scans

    def learn(self, line: str) -> bool:
        """One line from the supervisor; True for "done"."""
        words = line.split()
        if words == ["done"]:
            return True
        if len(words) == 3 and words[1].isdigit():
            ticks = int(words[2]) if words[2].isdigit() else None
            if words[0] == "group":
                self.groups[int(words[1])] = ticks
            elif words[0] == "proc" and ticks is not None:
                self.roots[int(words[1])] = ticks
        return False

    def scan(self) -> tuple[dict[int, tuple[int, int, int, str]], set[int], dict[int, int]]:
        """One look at /proc: the table, and the job's groups and processes alive now,
        each verified (see the module doc). Remembers every live process of the job, the
        descendants that left its groups included, for the next look."""
        table = _snapshot()
        groups = set()
        for pgid, ticks in self.groups.items():
            leader = table.get(pgid)
            if leader is not None and ticks is not None and leader[2] == ticks:
                groups.add(pgid)
            elif any(
                known_pgid == pgid and table.get(pid, (0, 0, None))[1:3] == (pgid, known_ticks)
                for pid, (known_ticks, known_pgid) in self.known.items()
            ):
                groups.add(pgid)
        children: dict[int, list[int]] = {}
        for pid, (ppid, _, _, _) in table.items():
            children.setdefault(ppid, []).append(pid)
        seeds = [pid for pid, entry in table.items() if entry[1] in groups]
        for pid, ticks in [*self.roots.items(), *((p, t) for p, (t, _) in self.known.items())]:
            if pid in table and table[pid][2] == ticks:
                seeds.append(pid)
        found: dict[int, tuple[int, int]] = {}
        while seeds:
            pid = seeds.pop()
            if pid in found or pid not in table or pid in (os.getpid(), 1):
                continue
            _, pgid, ticks, _ = table[pid]
            found[pid] = (ticks, pgid)
            seeds.extend(children.get(pid, []))
        self.known = found
        processes = {pid: ticks for pid, (ticks, _) in found.items() if table[pid][3] != "Z"}
        return table, groups, processes

    def signal(self, signum: int) -> bool:
        """Send `signum` to what is left of the job; False when nothing is."""
        _, groups, processes = self.scan()
        if not processes:
            return False
        for pgid in groups:
            _kill(os.killpg, pgid, signum)
        for pid in processes:
            _kill(os.kill, pid, signum)
        return True

    def end(self, grace: float) -> None:
        if not self.signal(signal.SIGTERM):
            return
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            time.sleep(0.1)
            if not self.scan()[2]:
                return
        self.signal(signal.SIGKILL)


def _kill(send: Callable[[int, int], None], target: int, signum: int) -> None:
    try:
        send(target, signum)
    except (ProcessLookupError, PermissionError):
        pass


def mark_interrupted(run_dir: Path, supervisor_pid: int) -> None:
    """run.json says the run was interrupted, and why (unless it already has an end)."""
    from mldebug.files.rundir import STATUS_INTERRUPTED, STATUS_RUNNING, RunPaths, read_manifest
    from mldebug.launch.manifest import release_reserve, write_manifest

    paths = RunPaths(run_dir)
    data = read_manifest(run_dir)
    if data is None or data.get("status") != STATUS_RUNNING:
        release_reserve(paths)
        return
    data["status"] = STATUS_INTERRUPTED
    data["end_time"] = time.time()
    data["reason"] = (
        f"mldebug run (pid {supervisor_pid}) was killed before its job ended; "
        "its guardian stopped the ranks"
    )
    ranks = data.get("ranks")
    for entry in ranks if isinstance(ranks, list) else []:
        if isinstance(entry, dict) and entry.get("status") == STATUS_RUNNING:
            entry["status"] = STATUS_INTERRUPTED
    try:
        write_manifest(paths, data)
    except OSError:
        pass
    release_reserve(paths)


def main(argv: list[str]) -> int:
    for signum in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)  # it ends when its pipe does, never before
    run_dir, grace, supervisor_pid = Path(argv[0]), float(argv[1]), int(argv[2])
    job = Job()
    selector = selectors.DefaultSelector()
    selector.register(0, selectors.EVENT_READ)
    pending, done = b"", False
    next_scan = time.monotonic() + SCAN_INTERVAL
    while True:
        timeout = max(0.0, next_scan - time.monotonic())
        if selector.select(timeout):
            try:
                data = os.read(0, 65536)
            except OSError:
                data = b""
            if not data:
                break
            pending += data
            *lines, pending = pending.split(b"\n")
            for line in lines:
                done = job.learn(line.decode("ascii", "replace")) or done
            if done:
                return 0
        if time.monotonic() >= next_scan:
            job.scan()
            next_scan = time.monotonic() + SCAN_INTERVAL
    job.end(grace)
    mark_interrupted(run_dir, supervisor_pid)
    return 0
