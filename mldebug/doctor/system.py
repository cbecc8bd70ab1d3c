"""Checks of the operating system: may we trace, are the tools there, is there room."""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
from pathlib import Path

from mldebug.doctor.check import FAIL, OK, WARN, Check, Probe
from mldebug.files.rundir import runs_root
from mldebug.files.safeio import read_head
from mldebug.textsafe import one_line
from mldebug.wording import human_bytes

CAP_SYS_PTRACE = 19  # linux/capability.h
YAMA = Path("/proc/sys/kernel/yama/ptrace_scope")
YAMA_MEANING = {
    "0": "any process of the same user may be traced",
    "1": "only a process's ancestors may trace it (restricted)",
    "2": "only processes with CAP_SYS_PTRACE may trace (admin-only)",
    "3": "nobody may trace, until reboot (no attach)",
}
GiB = 1 << 30
MiB = 1 << 20


def small_file(path: str | Path, limit: int = 4096) -> str | None:
    try:
        return read_head(path, limit).decode("utf-8", "replace").strip()
    except OSError:
        return None


def capabilities(pid: int | str = "self") -> int | None:
    """The effective capability mask of a process, from /proc/PID/status."""
    status = small_file(f"/proc/{pid}/status", 16384) or ""
    for line in status.splitlines():
        if line.startswith("CapEff:"):
            try:
                return int(line.split()[1], 16)
            except (IndexError, ValueError):
                return None
    return None


def container_hint() -> str:
    """Why this looks like a container, or ""."""
    if os.path.exists("/.dockerenv"):
        return "docker (/.dockerenv)"
    if os.path.exists("/run/.containerenv"):
        return "podman (/run/.containerenv)"
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return "kubernetes (KUBERNETES_SERVICE_HOST)"
    cgroup = small_file("/proc/1/cgroup", 8192) or ""
    for word in ("docker", "kubepods", "containerd", "lxc", "libpod"):
        if word in cgroup:
            return f"{word} (/proc/1/cgroup)"
    return ""


def probe_read(pid: int) -> str:
    """Whether this process may read `pid`'s memory as py-spy does: "" if so, else why not.
    Opening /proc/PID/mem takes the same ptrace permission check (Yama included) and
    neither stops nor changes the process."""
    try:
        fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY)
    except FileNotFoundError:
        return "gone"
    except OSError as error:
        return os.strerror(error.errno) if error.errno else str(error)
    os.close(fd)
    return ""


def owner(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def ptrace_check(target: int | None = None) -> list[Check]:
    uid = os.geteuid()
    caps = capabilities()
    has_cap = caps is not None and bool(caps >> CAP_SYS_PTRACE & 1)
    scope = small_file(YAMA)
    reasons = []
    if scope is not None:
        reasons.append(f"yama ptrace_scope is {scope}: {YAMA_MEANING.get(scope, 'unknown')}")
    else:
        reasons.append("no Yama LSM (no ptrace_scope)")
    reasons.append(
        "this process has CAP_SYS_PTRACE" if has_cap else "this process lacks CAP_SYS_PTRACE"
    )
    hint = container_hint()
    if hint:
        reasons.append(f"in a container: {hint}")
    seccomp = next(
        (
            line.split()[1]
            for line in (small_file("/proc/self/status", 16384) or "").splitlines()
            if line.startswith("Seccomp:") and len(line.split()) > 1
        ),
        "0",
    )
    if seccomp == "2":
        reasons.append("a seccomp filter is active (it may block ptrace)")
    why = "; ".join(reasons)
    # What the rules allow for a process of our own that is not our descendant (what
    # `mldebug dump` reads): refused by scope 3, by 2 without the capability, by 1 unless
    # the target opted in. Root without CAP_SYS_PTRACE (a container) is refused across users.
    if scope == "3":
        verdict = FAIL
    elif scope == "2" and not has_cap:
        verdict = FAIL
    elif scope == "1" and not has_cap:
        verdict = FAIL
    else:
        verdict = OK
    checks = []
    # A real probe: our parent (the shell) is ours and not our descendant, like a rank.
    parent = os.getppid()
    if parent > 1 and owner(parent) == uid:
        refused = probe_read(parent)
        if refused and refused != "gone":
            verdict = FAIL
            why = f"reading process {parent} (your shell) was refused: {refused}; {why}"
    summary = (
        f"may read your own processes (uid {uid}): {why}"
        if verdict == OK
        else f"mldebug cannot read your processes: {why}"
    )
    checks.append(Check("ptrace", verdict, summary, "ptrace-permission"))
    if target is not None:
        checks.append(_target_check(target, uid, has_cap, why))
    return checks


def _target_check(target: int, uid: int, has_cap: bool, why: str) -> Check:
    name = f"ptrace pid {target}"
    target_uid = owner(target)
    if target_uid is None:
        return Check(name, FAIL, f"no process {target}", "ptrace-permission")
    refused = probe_read(target)
    if not refused:
        return Check(name, OK, f"process {target} (uid {target_uid}) can be read", None)
    if target_uid != uid and not has_cap:
        detail = (
            f"process {target} belongs to uid {target_uid}, you are uid {uid}: reading "
            f"another user's process needs root with CAP_SYS_PTRACE ({refused}); {why}. "
            "Run mldebug as the user who started the job"
        )
    else:
        detail = f"reading process {target} (uid {target_uid}) was refused: {refused}; {why}"
    return Check(name, FAIL, detail, "ptrace-permission")


def _version(argv: list[str], timeout: float = 5.0) -> str:
    try:
        done = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"? ({error})"
    lines = (done.stdout or done.stderr).strip().splitlines()
    return one_line(lines[0][:200]) if lines else "?"


def tool_checks() -> list[Check]:
    checks = []
    spy = shutil.which("py-spy")
    if spy:
        checks.append(Check("py-spy", OK, f"{_version([spy, '--version'])} ({spy})", None))
    else:
        checks.append(
            Check(
                "py-spy",
                FAIL,
                "py-spy is not on PATH: mldebug dump and attach cannot read stacks "
                "(pip install py-spy)",
                None,
            )
        )
    gdb = shutil.which("gdb")
    if gdb:
        checks.append(Check("gdb", OK, f"{_version([gdb, '--version'])} ({gdb})", "native-crash"))
    else:
        checks.append(
            Check(
                "gdb",
                WARN,
                "gdb is not on PATH: native stacks of frozen ranks and core files cannot be "
                "read (apt-get install gdb)",
                "native-crash",
            )
        )
    return checks


def shm_check(path: str = "/dev/shm") -> list[Check]:
    try:
        stat = os.statvfs(path)
    except OSError as error:
        return [Check("shm", WARN, f"{path}: {error.strerror}", "dataloader-worker-hang")]
    total, free = stat.f_blocks * stat.f_frsize, stat.f_bavail * stat.f_frsize
    detail = f"{path}: {human_bytes(total)}, {human_bytes(free)} free"
    if total < GiB:
        return [
            Check(
                "shm",
                WARN,
                f"{detail}: small for DataLoader workers and NCCL (containers: --shm-size=16g "
                "or --ipc=host)",
                "dataloader-worker-hang",
            )
        ]
    return [Check("shm", OK, detail, "dataloader-worker-hang")]


def existing_ancestor(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path("/")


def disk_check(directory: Path | None = None) -> list[Check]:
    target = directory or runs_root()
    where = existing_ancestor(target)
    stat = os.statvfs(where)  # may block on a hung filesystem: run_checks bounds it
    free = stat.f_bavail * stat.f_frsize
    total = stat.f_blocks * stat.f_frsize
    inodes = stat.f_favail
    on = f" (not created yet; on {where})" if where != target else ""
    detail = f"run directory {target}{on}: {human_bytes(free)} free of {human_bytes(total)}"
    if stat.f_files:
        detail += f", {inodes} inodes free of {stat.f_files}"
    if free < 100 * MiB or (stat.f_files and inodes < 1000):
        return [Check("disk", FAIL, detail + ": nearly full", "disk-full-checkpoint")]
    if free < GiB or (total and free < total * 0.05):
        return [Check("disk", WARN, detail + ": little room left", "disk-full-checkpoint")]
    return [Check("disk", OK, detail, "disk-full-checkpoint")]


def core_check() -> list[Check]:
    soft, _hard = resource.getrlimit(resource.RLIMIT_CORE)
    pattern = small_file("/proc/sys/kernel/core_pattern") or ""
    limit = "unlimited" if soft == resource.RLIM_INFINITY else f"{soft} bytes"
    if pattern.startswith("|"):
        handler = pattern[1:].split()[0] if pattern[1:].split() else "?"
        where = f"core_pattern pipes cores to {handler}"
        if "systemd-coredump" in handler:
            where += " (coredumpctl list)"
        elif "apport" in handler:
            where += " (/var/crash; apport skips programs not from a package)"
        if container_hint():
            where += "; in a container that handler runs on the host"
    else:
        where = f"core_pattern {pattern!r}" if pattern else "core_pattern unreadable"
    detail = f"core size limit (ulimit -c) {limit}; {one_line(where)}"
    if soft == 0:
        return [
            Check(
                "core-dumps",
                WARN,
                detail + ": a crashing rank leaves no core (mldebug run --core-dumps, or "
                "ulimit -c unlimited)",
                "core-dumps",
            )
        ]
    return [Check("core-dumps", OK, detail, "core-dumps")]


def probes(target: int | None = None) -> list[Probe]:
    return [
        Probe("ptrace", lambda: ptrace_check(target), "ptrace-permission"),
        Probe("tools", tool_checks, None),
        Probe("shm", shm_check, "dataloader-worker-hang", timeout=5.0),
        Probe("disk", disk_check, "d-state-frozen-fs", timeout=5.0),
        Probe("core-dumps", core_check, "core-dumps"),
    ]
