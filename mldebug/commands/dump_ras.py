"""`dump`'s question to NCCL's RAS: asked when a rank's endpoint answers, judged with the
stacks just read (collect/ras.py asks; nccl/ras_verdict.py judges). Silent when nothing
listens at NCCL's default address: a job without NCCL 2.24+ is the usual case."""

from __future__ import annotations

from dataclasses import replace

from mldebug.model import JobReadings, JobSnapshot


def with_ras(snapshot: JobSnapshot, readings: JobReadings) -> tuple[JobSnapshot, JobReadings]:
    """The snapshot with RAS's findings added, and the readings with what asking left noted."""
    from mldebug.collect.ras import DEFAULT_PORT, ask_ras
    from mldebug.nccl.ras_verdict import ras_findings

    views = [v for v in snapshot.ranks if v.target is not None and v.target.pid]
    if not views:
        return snapshot, readings
    asked = ask_ras([v.target.pid for v in views])  # type: ignore[union-attr]
    # Nothing at NCCL's default address is not news; an address the ranks named is.
    notes = tuple(n for n in asked.notes if f":{DEFAULT_PORT}: nothing listens" not in n)
    if asked.report is None:
        return snapshot, replace(readings, notes=readings.notes + notes) if notes else readings
    stacks = {v.target.pid: v.collective for v in views}  # type: ignore[union-attr]
    rank_of = {v.target.pid: v.rank for v in views}  # type: ignore[union-attr]
    found = ras_findings([asked.report], stacks, rank_of)
    said = f"NCCL RAS {asked.report.path} answered (NCCL {asked.report.nccl_version or '?'})"
    snapshot = replace(snapshot, findings=snapshot.findings + tuple(found))
    return snapshot, replace(readings, notes=readings.notes + notes + (said,))
