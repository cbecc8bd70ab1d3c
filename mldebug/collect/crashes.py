"""How ranks of an `mldebug run` ended badly: error.json files and run.json's first failure.

The in-rank hook writes `ranks/<rank>/error.json` when an exception reaches the top; the
launcher writes `first_failure` into run.json when the job ends (it also covers signals,
which leave no error file), and that one leads. Both are read here for the verdict (`with_crashes` puts them on
a job's targets); nothing is trusted beyond plain JSON values, and what is read is bounded:
each file, the number of ranks, the bytes of all error files together, and each string kept.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import replace
from pathlib import Path

from mldebug.files import rundir, safeio
from mldebug.model import JobTargets, RankCrash

MAX_RANKS = 1 << 16  # error files looked at per run directory
MAX_ERROR_BYTES = safeio.MAX_JSON_BYTES  # one error.json
MAX_TOTAL_BYTES = 64 << 20  # all error.json files of a run together
MAX_MESSAGE_CHARS = 64 << 10  # the whole message stays in the rank's stderr.log
MAX_FIELD_CHARS = 4096  # exception type, how, location
RECIPE_ID = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")


def _text(value: object, limit: int = MAX_FIELD_CHARS) -> str:
    return str(value)[:limit] if isinstance(value, (str, int, float)) else ""


def recipe_id(value: object) -> str:
    """A recipe id as the launcher writes one (`native-crash`), else nothing."""
    return value if isinstance(value, str) and RECIPE_ID.fullmatch(value) else ""


def _crash(data: dict, rank: int, how: str = "") -> RankCrash | None:
    when = data.get("time") or 0.0
    if isinstance(when, bool) or not isinstance(when, (int, float, str)):
        return None
    try:
        when = float(when)
    except (ValueError, OverflowError):  # OverflowError: an integer beyond a float
        return None
    if not math.isfinite(when):
        return None
    location = data.get("user_location") or data.get("location") or None
    return RankCrash(
        rank=rank,
        time=when,
        how=_text(data.get("how") or how),
        exc_type=_text(data.get("type") or ""),
        message=_text(data.get("message") or "", MAX_MESSAGE_CHARS),
        location=_text(location) or None,
        recipe=recipe_id(data.get("recipe")),
    )


def read_crashes(run_dir: str | Path, manifest: dict | None = None) -> tuple[RankCrash, ...]:
    """Every rank's crash that the run directory records, earliest first."""
    paths = rundir.RunPaths(Path(run_dir))
    manifest = manifest if manifest is not None else rundir.read_manifest(paths.root) or {}
    crashes: dict[int, RankCrash] = {}
    first = manifest.get("first_failure")
    lead = rundir.parse_rank(first.get("rank")) if isinstance(first, dict) else None
    if lead is not None and isinstance(first, dict):
        crash = _crash(first, lead)
        if crash is not None:
            crashes[crash.rank] = crash
    budget = MAX_TOTAL_BYTES
    for rank in paths.rank_ids()[:MAX_RANKS]:
        if rank in crashes:
            continue
        path = paths.error_file(rank)
        try:
            size = os.lstat(path).st_size
        except OSError:
            continue  # no error file: the usual case
        if size > MAX_ERROR_BYTES or size > budget:
            continue
        budget -= size
        data = safeio.read_json(path, MAX_ERROR_BYTES)
        if data is not None:
            crash = _crash(data, rank, how="uncaught exception")
            if crash is not None:
                crashes[rank] = crash
    # The launcher's first failure leads: it has ordered the failures already, knowing what
    # the files alone do not (a rank it saw die by a signal after its peers' errors about it).
    first_crash = [crashes.pop(lead)] if lead in crashes else []
    return tuple(first_crash + sorted(crashes.values(), key=lambda c: (c.time, c.rank)))


def with_crashes(job: JobTargets, manifest: dict | None = None) -> JobTargets:
    """`job` with the crashes its run directory records now; as it is without a run
    directory. `manifest`: run.json, when the caller has just read it."""
    if job.run_dir is None:
        return job
    return replace(job, crashes=read_crashes(job.run_dir, manifest))
