"""The snapshot key: write the current report as text and JSON, and say where."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from mldebug.files.rundir import RunPaths
from mldebug.files.safeio import check_private_dir, create_new, make_private_dir
from mldebug.model import JobSnapshot


def report_dir(run_dir: Path | None, cwd: Path) -> Path:
    """Reports of a run go with the run (<run>/reports/) when the run directory is this
    user's own and private; otherwise (no run, or root looking at another user's run, which
    must not get a root-owned folder in it) the current directory."""
    if run_dir is None:
        return cwd
    try:
        check_private_dir(Path(run_dir))
    except OSError:
        return cwd
    return RunPaths(Path(run_dir)).reports_dir


def write_report(
    snapshot: JobSnapshot, run_dir: Path | None, cwd: Path, now: float
) -> tuple[Path, Path]:
    from mldebug.report.jsonout import snapshot_to_json
    from mldebug.report.text import render_text

    folder = report_dir(run_dir, cwd)
    if folder != cwd:
        make_private_dir(folder)
    stem = "mldebug-attach-" + time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    text_path, json_path = _free_name(folder, stem)
    body = render_text(snapshot, verbose=True)  # every rank's threads: it is for later
    data = snapshot_to_json(snapshot)
    _write(text_path, body if body.endswith("\n") else body + "\n")
    _write(json_path, json.dumps(data, indent=1) + "\n")
    return text_path, json_path


def _free_name(folder: Path, stem: str) -> tuple[Path, Path]:
    """Two saves in the same second must not overwrite each other."""
    for index in range(1000):
        suffix = f"-{index}" if index else ""
        text_path = folder / f"{stem}{suffix}.txt"
        if not os.path.lexists(text_path):
            return text_path, folder / f"{stem}{suffix}.json"
    raise OSError(f"too many reports named {stem}* in {folder}")


def _write(path: Path, content: str) -> None:
    fd = create_new(path)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(content)
