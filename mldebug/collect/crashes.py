"""How ranks of an `mldebug run` ended badly: error.json files and run.json's first failure.

The in-rank hook writes `ranks/<rank>/error.json` when an exception reaches the top; the
launcher writes `first_failure` into run.json when the job ends (it also covers signals,
which leave no error file). Both are read here for the verdict; nothing is trusted beyond
plain JSON values.
"""

from __future__ import annotations

from pathlib import Path

from mldebug import rundir
from mldebug.model import RankCrash


def _crash(data: dict, rank: int, how: str = "") -> RankCrash | None:
    try:
        when = float(data.get("time") or 0.0)
    except (TypeError, ValueError, OverflowError):  # OverflowError: an integer beyond a float
        return None
    location = data.get("user_location") or data.get("location") or None
    return RankCrash(
        rank=rank,
        time=when,
        how=str(data.get("how") or how),
        exc_type=str(data.get("type") or ""),
        message=str(data.get("message") or ""),
        location=str(location) if location else None,
    )


def read_crashes(run_dir: str | Path, manifest: dict | None = None) -> tuple[RankCrash, ...]:
    """Every rank's crash that the run directory records, earliest first."""
    paths = rundir.RunPaths(Path(run_dir))
    manifest = manifest if manifest is not None else rundir.read_manifest(paths.root) or {}
    crashes: dict[int, RankCrash] = {}
    first = manifest.get("first_failure")
    if isinstance(first, dict) and isinstance(first.get("rank"), int):
        crash = _crash(first, first["rank"])
        if crash is not None:
            crashes[crash.rank] = crash
    for rank in paths.rank_ids():
        if rank in crashes:
            continue
        data = rundir.read_json(paths.error_file(rank))
        if data is not None:
            crash = _crash(data, rank, how="uncaught exception")
            if crash is not None:
                crashes[rank] = crash
    return tuple(sorted(crashes.values(), key=lambda crash: (crash.time, crash.rank)))
