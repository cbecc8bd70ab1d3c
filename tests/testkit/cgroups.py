"""A cgroup with a CPU quota, for tests that need a process slowed by the kernel itself."""

from __future__ import annotations

from pathlib import Path


def cpu_cgroup(name: str, quota: int, period: int) -> Path | None:
    """A new cgroup with a CPU quota of `quota` microseconds a `period`, v1 or v2, where this
    process may make one."""
    v1 = Path("/sys/fs/cgroup/cpu")
    v2 = Path("/sys/fs/cgroup")
    try:
        if (v1 / "cpu.cfs_quota_us").exists():
            group = v1 / name
            group.mkdir()
            (group / "cpu.cfs_period_us").write_text(str(period))
            (group / "cpu.cfs_quota_us").write_text(str(quota))
            return group
        if "cpu" in (v2 / "cgroup.controllers").read_text().split():
            group = v2 / name
            group.mkdir()
            (group / "cpu.max").write_text(f"{quota} {period}")
            return group
    except OSError:
        return None
    return None
