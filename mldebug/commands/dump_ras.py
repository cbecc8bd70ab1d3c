"""`dump`'s question to NCCL's RAS: asked when a rank's endpoint answers, judged with the
stacks just read (collect/ras.py asks; ras/verdict.py makes the findings; the judge
weighs them with the rest). Silent when nothing listens at NCCL's default address: a job
without NCCL 2.24+ is the usual case."""

from __future__ import annotations

from mldebug.model import JobReadings, JobSnapshot, SourceFindings


def ras_source(snapshot: JobSnapshot, readings: JobReadings) -> SourceFindings:
    """What NCCL RAS says of the ranks read, and what asking it left noted."""
    from mldebug.collect.ras import ask_ras, quiet_notes
    from mldebug.ras.verdict import view_findings

    del readings  # RAS is asked through the ranks' pids, as read
    views = [v for v in snapshot.ranks if v.target is not None and v.target.pid]
    if not views:
        return SourceFindings()
    asked = ask_ras([v.target.pid for v in views])  # type: ignore[union-attr]
    notes = quiet_notes(asked.notes)
    if asked.report is None:
        return SourceFindings(notes=notes)
    said = f"NCCL RAS {asked.report.path} answered (NCCL {asked.report.nccl_version or '?'})"
    found = view_findings(asked.report, snapshot.ranks)
    return SourceFindings(found=tuple(found), notes=(*notes, said))
