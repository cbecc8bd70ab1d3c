"""`mldebug run --core-dumps`: ranks may dump core, and their cores end up in <run>/cores/.

Each rank starts with its soft RLIMIT_CORE raised to the hard limit (in the child, before
exec). mldebug does not change the kernel's core_pattern (a system-wide setting): it reads
it. A path pattern (`core`, `core.%p`, `/var/crash/core.%e.%p`) is where a rank that died
of a core-dumping signal is looked for: the core whose own notes name the rank's pid is
moved to <run>/cores/rank<N>.<pid>.core. A pipe to a handler (systemd-coredump, apport)
keeps the file: the run says which command gets it. What happened goes into run.json (the
rank's `core`) and the first-failure report.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from mldebug.collect.cores import (
    CORE_SIGNALS,
    core_limit_note,
    core_plan,
    find_core,
    keep_core,
    raise_core_limit,
    signal_name,
)


class CoreCatcher:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.plan = core_plan()
        self.cwd = os.getcwd()  # the ranks' working directory: a relative pattern's base
        self.since = time.time() - 1.0
        self.found: dict[int, str] = {}  # rank -> what the report says about its core

    def preexec(self, previous: Callable[[], None] | None) -> Callable[[], None]:
        """A Popen preexec_fn: `previous` (if any), then the raised core limit."""

        def run() -> None:
            if previous is not None:
                previous()
            raise_core_limit()

        return run

    def summary(self) -> dict:
        """For run.json: the pattern and how cores are found."""
        note = core_limit_note()
        return {
            "core_pattern": self.plan.pattern,
            "piped": self.plan.piped,
            "cores_dir": str(self.root / "cores"),
            "note": note or self.plan.explain(),
        }

    def start_note(self) -> str | None:
        """A line for the console when cores will not land in the run directory."""
        note = core_limit_note()
        if note:
            return f"mldebug: --core-dumps: {note}"
        if self.plan.piped:
            return f"mldebug: --core-dumps: {self.plan.explain()}"
        return None

    def rank_ended(self, rank: int, pid: int, returncode: int | None) -> dict | None:
        """Where the core of a rank that died of a core-dumping signal is (for run.json),
        or None when it did not die so."""
        if returncode is None or returncode >= 0 or -returncode not in CORE_SIGNALS:
            return None
        name = signal_name(-returncode)
        if self.plan.piped:
            text = f"{name}: its core went to {self.plan.handler}; get it with: " + (
                self.plan.fetch_command(pid, f"{self.root}/cores/rank{rank}.{pid}.core")
            )
            self.found[rank] = text
            return {"piped": True, "handler": self.plan.handler, "fetch": text}
        path = find_core(self.plan, pid, self.cwd, self.since)
        if path is None:
            text = (
                f"{name}, but no core file was found (kernel.core_pattern "
                f"{self.plan.pattern!r}, working directory {self.cwd}; "
                f"{core_limit_note() or 'a rank that changed directory, lowered its limit or is setuid dumps elsewhere or not at all'})"
            )
            self.found[rank] = text
            return {"path": None, "note": text}
        kept = keep_core(path, self.root / "cores", rank, pid)
        text = f"{kept} (read it: mldebug dump --core {kept})"
        if self.plan.uses_pid is False and "%p" not in self.plan.pattern:
            text += (
                f"; kernel.core_pattern {self.plan.pattern!r} names no pid: another rank's "
                "core in the same directory would replace it"
            )
        self.found[rank] = text
        return {"path": str(kept), "signal": name}
