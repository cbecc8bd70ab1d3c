"""`mldebug doctor`: checks of the machine a job runs on, each OK / WARN / FAIL / SKIP.

Every check is a function that returns one or more `Check`s and reads only what it must:
small files under /proc and /sys, a tool's `--version`, a subprocess with a timeout for
torch (doctor never imports torch itself). `run_checks` runs them all at once, each in its
own daemon thread, and gives up on any that has not answered by the deadline (a hung
filesystem must not hang the doctor): that check reads as WARN "did not answer".
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from mldebug.doctor.check import FAIL, OK, SKIP, STATUSES, WARN, Check, Probe

__all__ = ["FAIL", "OK", "SKIP", "STATUSES", "WARN", "Check", "Probe", "all_probes", "run_checks"]


def run_checks(probes: Sequence[Probe]) -> list[Check]:
    """Every probe's checks, in the probes' order; one that raised or did not answer in
    its time is reported as such, never as a crash of the doctor."""
    results: dict[int, list[Check]] = {}

    def work(index: int, probe: Probe) -> None:
        try:
            results[index] = list(probe.run())
        except Exception as error:  # a check that breaks says so and the others go on
            results[index] = [Check(probe.name, WARN, f"could not check: {error}", probe.recipe)]

    threads = []
    for index, probe in enumerate(probes):
        thread = threading.Thread(target=work, args=(index, probe), daemon=True)
        thread.start()
        threads.append((thread, time.monotonic() + probe.timeout))
    for thread, deadline in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    checks = []
    for index, probe in enumerate(probes):
        checks += results.get(index) or [
            Check(probe.name, WARN, f"did not answer within {probe.timeout:g} s", probe.recipe)
        ]
    return checks


def all_probes(target: int | None = None) -> list[Probe]:
    """Every check; `target`: a pid whose readability the ptrace check also tries."""
    from mldebug.doctor import envvars, gpu, system

    return [*system.probes(target), *gpu.probes(), *envvars.probes()]
