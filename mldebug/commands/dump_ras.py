"""`dump`'s question to NCCL's RAS: asked when a rank's endpoint answers, judged with the
stacks just read (collect/ras.py asks; nccl/ras_verdict.py judges). Silent when nothing
listens at NCCL's default address: a job without NCCL 2.24+ is the usual case."""

from __future__ import annotations

from dataclasses import replace

from mldebug.model import JobReadings, JobSnapshot


def with_ras(snapshot: JobSnapshot, readings: JobReadings) -> tuple[JobSnapshot, JobReadings]:
    """The snapshot with RAS's findings added, and the readings with what asking left noted."""
    from mldebug.collect.ras import ask_ras, quiet_notes
    from mldebug.nccl.ras_verdict import view_findings

    views = [v for v in snapshot.ranks if v.target is not None and v.target.pid]
    if not views:
        return snapshot, readings
    asked = ask_ras([v.target.pid for v in views])  # type: ignore[union-attr]
    notes = quiet_notes(asked.notes)
    if asked.report is None:
        return snapshot, replace(readings, notes=readings.notes + notes) if notes else readings
    found = view_findings(asked.report, snapshot.ranks)
    said = f"NCCL RAS {asked.report.path} answered (NCCL {asked.report.nccl_version or '?'})"
    snapshot = replace(snapshot, findings=snapshot.findings + tuple(found))
    return snapshot, replace(readings, notes=readings.notes + notes + (said,))
