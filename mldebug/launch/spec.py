"""What `mldebug run` is asked to start: the command, how many ranks, the switches, where
its output goes. Plain data, read by the supervisor and written into run.json."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from mldebug.files.rundir import RunPaths
from mldebug.launch import env as envs
from mldebug.launch.output import Console, RankFilter


@dataclass
class LaunchSpec:
    paths: RunPaths
    command: list[str]  # native: the rank's argv (python script args); wrap: the launcher
    mode: str = envs.MODE_NATIVE
    nproc: int = 1
    master_addr: str = "127.0.0.1"
    master_port: int | None = None  # None: a free one
    options: envs.DebugOptions = field(default_factory=envs.DebugOptions)
    grace_period: float = 5.0
    console: Console | None = None  # None: output only to files (the TUI shows it)
    rank_filter: RankFilter = field(default_factory=RankFilter)
    prefix: bool = True
    argv: list[str] = field(default_factory=list)  # the mldebug command line, for run.json
    hang_timeout: float | None = None  # --hang-timeout: seconds without progress; None: off
    # How the views say the watchdog's look (report/hang.py's hang_report), handed in by
    # the command: the launcher never renders. Needed with hang_timeout.
    render: Callable[[Any, Sequence[str]], tuple[str, str, dict]] | None = None
    on_hang: str = "keep"  # --on-hang: "keep" the job after the hang report, or "stop" it
    core_dumps: bool = False  # --core-dumps: ranks may dump core, cores go to <run>/cores/
    # The environment the job starts from (None: mldebug's own); `mldebug check` hands its
    # limits and, under SLURM, an environment without the front end's allocation.
    env: dict[str, str] | None = None
