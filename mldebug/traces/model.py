"""What one rank's profiler trace says, as plain frozen values (no I/O)."""

from __future__ import annotations

from dataclasses import dataclass

# Where the trace's time went: CPU ops on the host, or kernels on a device.
ON_HOST = "host"
ON_DEVICE = "device"


@dataclass(frozen=True)
class Collective:
    """One collective as one rank's trace recorded it."""

    group: str  # the process group's name ("0" is the default group)
    op: str  # all_reduce, broadcast, ...
    size: str  # what identifies its payload across ranks (elements, or shapes)
    seq: int | None  # torch's sequence number on the group, where the trace has it
    start: float  # microseconds, this rank's clock
    duration: float  # microseconds: waiting for the others and moving data


@dataclass(frozen=True)
class RankTrace:
    source: str  # the file
    rank: int
    world_size: int | None
    backend: str  # "gloo", "nccl", or "" where the trace does not say
    where: str  # ON_HOST or ON_DEVICE: whose busy time counts as compute
    events: int  # events read
    steps: tuple[float, ...]  # ProfilerStep durations, microseconds
    window: float  # microseconds judged: the profiled steps (or the whole trace)
    compute: float  # microseconds computing (union)
    comm: float  # microseconds in collectives (union)
    exposed: float  # of `comm`, the time nothing computed beside it
    idle: float  # neither computing nor communicating
    data: float  # host: waiting for the DataLoader's next batch
    sync: float  # host: waiting for the device (item(), synchronize)
    collectives: tuple[Collective, ...]
    cut: bool = False  # the file was longer than what was read

    def share(self, part: float) -> float:
        return part / self.window if self.window > 0 else 0.0

    @property
    def step(self) -> float:
        """The median step, microseconds (the window when no step was marked)."""
        if not self.steps:
            return self.window
        ordered = sorted(self.steps)
        return ordered[len(ordered) // 2]
