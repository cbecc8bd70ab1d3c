"""One look at a job, as `mldebug dump` takes it: the one function `dump` and the hang
watchdog of `mldebug run --hang-timeout` both call, so the two never drift apart.

A look is `observe_look` (read every rank's stack, its agent's state and events), the
findings of the run's files (NCCL logs, Flight Recorder dumps, and the ranks' stderr when a
rank failed: mldebug.nccl.scan) and of any other source the caller adds (NCCL RAS,
sampling), all judged once (analysis/judge.py) with the run's own hang threshold (from its
`--hang-timeout` in run.json, `hang_threshold`; else analysis.severity's default).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from mldebug.analysis.severity import ERROR_AFTER
from mldebug.analysis.snapshot import judged
from mldebug.files.rundir import read_manifest
from mldebug.model import JobReadings, JobSnapshot, JobTargets, SourceFindings
from mldebug.observe.pyspy import observe_look

# Another source of a look: what it says, given the snapshot as read and the readings.
Source = Callable[[JobSnapshot, JobReadings], SourceFindings]


def hang_threshold(timeout: float) -> float:
    """The wait that makes an error in a run under `--hang-timeout TIMEOUT`, for its
    watchdog's dump and for `dump` alike: three quarters of it (the wait is counted from the
    call, the quiet from the state written after it), never more than the default."""
    return max(1.0, min(ERROR_AFTER, timeout * 0.75))


def run_hang_after(run_dir: str | Path | None) -> float | None:
    """The hang threshold of the run's `--hang-timeout` (run.json), None without one."""
    if run_dir is None:
        return None
    try:
        manifest = read_manifest(run_dir)
    except OSError:
        return None
    options = manifest.get("options") if isinstance(manifest, dict) else None
    value = options.get("hang_timeout") if isinstance(options, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return hang_threshold(float(value)) if math.isfinite(value) and value > 0 else None


def run_files(snapshot: JobSnapshot, run_dir: str | Path | None) -> SourceFindings:
    """What the run's NCCL logs, Flight Recorder dumps and, when a rank failed, its stderr
    say (read only when the run has such files)."""
    root = snapshot.run_dir or run_dir
    if root is None:
        return SourceFindings()
    from mldebug.nccl.scan import run_findings  # only for a run: its import is not free

    failed = any(view.exit_code not in (None, 0) for view in snapshot.ranks)
    return SourceFindings(found=tuple(run_findings(root, failed)))


def look_at_job(
    job: JobTargets,
    error_after: float | None = None,
    sources: Sequence[Source] = (),
    **options: Any,
) -> tuple[JobSnapshot, JobReadings]:
    """(snapshot, readings) of one look at the job. `options`: the collector's (samples,
    interval, deadline, ...); `error_after`: the wait that makes a hang, else the run's
    (from its --hang-timeout), else the default; `sources`: more sources to hear before the
    verdict (the run's files always are). The judge is called once, with all of them."""
    if error_after is None:
        error_after = run_hang_after(job.run_dir)
    look, read = observe_look(job, error_after=error_after, **options)
    readings = read if read is not None else JobReadings(job, {})
    if error_after is None and look.snapshot.run_dir and look.snapshot.run_dir != job.run_dir:
        error_after = run_hang_after(look.snapshot.run_dir)
        if error_after is not None:
            look = replace(look, evidence=replace(look.evidence, error_after=error_after))
    said = [run_files(look.snapshot, job.run_dir)]
    said += [source(look.snapshot, readings) for source in sources]
    notes = tuple(note for s in said for note in s.notes if note not in readings.notes)
    if notes:
        readings = replace(readings, notes=readings.notes + notes)
    return judged(look, *said), readings


def look_at_run(
    root: str | Path, deadline: float, error_after: float | None = None
) -> tuple[JobSnapshot, tuple[str, ...]]:
    """(snapshot, notes) of the run directory's ranks, as `mldebug dump --run ROOT`."""
    from mldebug.targets import resolve_targets

    job = resolve_targets(run_dir=str(root))
    snapshot, readings = look_at_job(job, error_after, deadline=deadline)
    return snapshot, tuple(readings.notes)
