"""torchelastic's summary of a failed job (torchrun, accelerate, deepspeed launchers):

    torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
    ... Root Cause (first observed failure):
    [0]:
      time      : 2026-12-01_10:02:11
      host      : node-a
      rank      : 3 (local_rank: 3)
      exitcode  : -6 (pid: 4101)
      error_file: <N/A>
      traceback : Signal 6 (SIGABRT) received by PID 4101

and the agent's "failed (exitcode: -6) local_rank: 0 (pid: 123) of binary". The summary
names the first rank to exit and how; why is in that rank's own output. Format from
torch/distributed/elastic/multiprocessing/errors/__init__.py (1.9 to 2.13).
"""

from __future__ import annotations

import re
import signal

from mldebug.explain.finding import KIND_CHILD_FAILED, Explained
from mldebug.explain.text import Line

_RANK = re.compile(r"^rank\s*:\s*(?P<rank>\d+)(?: \(local_rank: (?P<local>\d+)\))?")
_EXIT = re.compile(r"^exitcode\s*:\s*(?P<code>-?\d+)(?: \(pid: (?P<pid>\d+)\))?")
_HOST = re.compile(r"^host\s*:\s*(?P<host>\S+)")
_TRACE = re.compile(r"^traceback\s*:\s*(?P<text>.*)")
_FAILED = re.compile(
    r"failed \(exitcode: (?P<code>-?\d+)\) local_rank: (?P<local>\d+) \(pid: (?P<pid>\d+)\)"
)


def _signal_name(code: int) -> str:
    if code >= 0:
        return ""
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def _verdict(code: int, lines: list[Line]) -> tuple[str, str, float, str]:
    """What the exit code says, the recipe, how sure, and the fix."""
    text = " ".join(
        line.text for line in lines[-2000:] if "atchdog" in line.text or "NCCL" in line.text
    )
    if code == -6 and ("Watchdog caught" in text or "watchdog thread terminated" in text):
        return (
            "SIGABRT from torch's NCCL watchdog, which takes a process down after a collective "
            "timed out: the timeout, not the abort, is the failure",
            "nccl-watchdog-timeout",
            0.7,
            "read the watchdog's line above it: which collective timed out, and which rank "
            "never joined it",
        )
    if code == -9:
        return (
            "SIGKILL: something outside killed it (the kernel's OOM killer when host memory "
            "ran out: `dmesg | grep -i oom`; or the scheduler)",
            "memory-leak",
            0.65,
            "check `dmesg -T | grep -i -e oom -e killed` on that node and the job's host "
            "memory; lower DataLoader workers / prefetch or pin_memory",
        )
    if code < 0:
        return (
            f"{_signal_name(code)}: a crash in native code (or an abort) with no Python exception",
            "native-crash",
            0.65,
            "get its core dump or run that rank under gdb; see its stderr's last lines",
        )
    return (
        f"exit code {code}: it raised an exception; its traceback (error_file, or the rank's "
        "own output) says which",
        "rank-crash",
        0.6,
        "scroll up to that rank's first traceback: the other ranks' errors come after it",
    )


def read(lines: list[Line]) -> list[Explained]:
    found: list[Explained] = []
    summaries = 0  # findings read from a Root Cause block (the agent's line says less)
    for index, line in enumerate(lines):
        text = line.text.strip()
        if text.startswith("Root Cause (first observed failure)"):
            rank = code = pid = host = None
            trace = ""
            cited = [line]
            for later in lines[index + 1 : index + 12]:
                body = later.text.strip()
                for pattern in (_RANK, _EXIT, _HOST, _TRACE):
                    match = pattern.match(body)
                    if not match:
                        continue
                    cited.append(later)
                    if pattern is _RANK:
                        rank = int(match.group("rank")[:6])
                    elif pattern is _EXIT:
                        code = int(match.group("code")[:6])
                        pid = match.group("pid")
                    elif pattern is _HOST:
                        host = match.group("host")
                    else:
                        trace = match.group("text")
                if body.startswith("====="):
                    break
            if code is None:
                continue
            why, recipe, sure, fix = _verdict(code, lines)
            where = f" on {host}" if host else ""
            summaries += 1
            found.insert(
                summaries - 1,
                Explained(
                    KIND_CHILD_FAILED,
                    f"rank {rank if rank is not None else '?'}{where} ended first (exitcode "
                    f"{code}{', pid ' + pid if pid else ''}): {why}",
                    sure,
                    recipe,
                    fix=fix,
                    ranks=(rank,) if rank is not None else (),
                    note="torchelastic's summary says which rank ended first and how, not why"
                    + (
                        ": error_file was not set (decorate main with @record)"
                        if "To enable traceback" in trace
                        else ""
                    ),
                ).cited(cited),
            )
        elif "failed (exitcode:" in text and not found:
            match = _FAILED.search(text)
            if match:
                code = int(match.group("code")[:6])
                why, recipe, sure, fix = _verdict(code, lines)
                found.append(
                    Explained(
                        KIND_CHILD_FAILED,
                        f"local rank {match.group('local')} (pid {match.group('pid')}) ended "
                        f"first with exitcode {code}: {why}",
                        sure - 0.05,
                        recipe,
                        fix=fix,
                        note="the agent names the local rank on its node; the global rank "
                        "is in the summary below it (Root Cause)",
                    ).cited([line])
                )
    if summaries:  # the summary names the global rank: the agent's line is said better
        found = found[:summaries]
    return found[:2]
