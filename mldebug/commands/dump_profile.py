"""`mldebug dump --profile SECONDS [--rate HZ]`: sample every rank for a few seconds, in
parallel, and say who the straggler is, without the agent (plain torchrun, srun...).

The usual dump is taken first (its stacks, findings and table); the sampling follows, and
its table and findings replace the agent's timing ones before the judge weighs them (the
agent's stay when no rank could be sampled).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from mldebug.commands.common import count, seconds
from mldebug.model import JobReadings, JobSnapshot, JobTargets, SourceFindings

if TYPE_CHECKING:
    from mldebug.observe.look import Source

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


def profile_source(job: JobTargets, args: argparse.Namespace) -> Source:
    """`--profile`: the source that samples the job's stacks for a while; its timing table
    and its straggler/input-bound verdict replace the agent's (one answer, not two)."""

    def sample(snapshot: JobSnapshot, readings: JobReadings) -> SourceFindings:
        from mldebug.analysis.timing import KIND_INPUT_BOUND, KIND_STRAGGLER
        from mldebug.analysis.timing_profile import judge_profiles, unsampled_notes
        from mldebug.collect.profile import sample_job

        del snapshot, readings  # sampling reads the processes afresh
        sampled = sample_job(job.targets, args.profile, args.rate)
        table, found, profiles = judge_profiles(sampled)
        notes = tuple(unsampled_notes(profiles))
        if not table.rows:
            return SourceFindings(notes=notes)
        replaced = frozenset({KIND_STRAGGLER, KIND_INPUT_BOUND}) if found else frozenset()
        return SourceFindings(found=tuple(found), notes=notes, replaces=replaced, timing=table)

    return sample
