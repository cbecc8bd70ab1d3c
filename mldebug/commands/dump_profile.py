"""`mldebug dump --profile SECONDS [--rate HZ]`: sample every rank for a few seconds, in
parallel, and say who the straggler is, without the agent (plain torchrun, srun...).

The usual dump is taken first (its stacks, findings and table); the sampling follows, and
its table and findings replace the agent's timing ones (the agent's stay in `--json` when
no rank could be sampled).
"""

from __future__ import annotations

import argparse
from dataclasses import replace

from mldebug.commands.common import count, seconds
from mldebug.model import JobSnapshot, JobTargets

MAX_SECONDS = 300.0
MAX_RATE = 1000
DEFAULT_RATE = 50


def add_profile_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--profile",
        type=seconds(1, MAX_SECONDS),
        metavar="SECONDS",
        help="sample every rank's stack for SECONDS (1-300) and say where each rank's time "
        "goes and which rank the others wait for (no agent needed)",
    )
    parser.add_argument(
        "--rate",
        type=count(1, MAX_RATE),
        default=DEFAULT_RATE,
        metavar="HZ",
        help=f"--profile: samples a second per rank (1-{MAX_RATE}, default {DEFAULT_RATE})",
    )


def with_profile(
    snapshot: JobSnapshot, job: JobTargets, args: argparse.Namespace
) -> tuple[JobSnapshot, list[str]]:
    """The snapshot with the sampled timing table and findings; notes for the ranks that
    could not be sampled."""
    from mldebug.analysis.timing import KIND_INPUT_BOUND, KIND_STRAGGLER
    from mldebug.analysis.timing_profile import judge_profiles, unsampled_notes
    from mldebug.collect.profile import sample_job

    sampled = sample_job(job.targets, args.profile, args.rate)
    table, found, profiles = judge_profiles(sampled)
    notes = unsampled_notes(profiles)
    if not table.rows:
        return snapshot, notes
    # The sampled verdict replaces the agent's straggler finding (one answer, not two).
    kept = tuple(
        f for f in snapshot.findings if not (found and f.kind in (KIND_STRAGGLER, KIND_INPUT_BOUND))
    )
    findings = tuple(found) + kept
    return replace(snapshot, timing=table, findings=findings), notes
