"""The model of where ranks' time goes: plain frozen dataclasses, no I/O.

From the agent's `timing` section of state.json (`RankTiming`), from `mldebug dump --profile`'s
sampled stacks (`RankProfile`), and what the analysis makes of them for the views
(`TimingTable`, one `TimingRow` a rank).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CallTiming:
    """One completed collective of one rank, on that rank's clock."""

    group: str
    seq: int
    op: str
    entered: float
    completed: float
    asynchronous: bool = False

    @property
    def wait(self) -> float:
        return max(0.0, self.completed - self.entered)


@dataclass(frozen=True)
class FlightCallTiming:
    """One collective of one rank from torch's Flight Recorder (DDP's C++ all-reduces the
    trace does not see): when it was enqueued (the host's clock), its duration where the
    recorder timed it (NCCL with TORCH_NCCL_ENABLE_TIMING), else None."""

    group: str
    seq: int
    op: str
    created: float
    duration: float | None = None
    step: int | None = None  # the rank's step it was enqueued in (its own count)


@dataclass(frozen=True)
class StepTiming:
    """One step's wall time and the seconds of it spent waiting, each kind apart."""

    step: int
    start: float
    wall: float
    collective: float = 0.0
    data: float = 0.0
    sync: float = 0.0
    # The run-queue delay inside the data wait (ready to run, no CPU: a busy node stretches
    # a loader's reads and sleeps); None where the agent could not read it.
    data_delay: float | None = None
    # The run-queue delay of the whole step (the training thread's, and its collectives'
    # threads' while it waited in them); None where not known.
    delay: float | None = None

    @property
    def compute(self) -> float:
        return max(0.0, self.wall - self.collective - self.data - self.sync)

    @property
    def own_data(self) -> float:
        """The data wait less its run-queue delay: what it took with a CPU of its own."""
        return max(0.0, self.data - (self.data_delay or 0.0))


@dataclass(frozen=True)
class StepBlock:
    """A block of consecutive units (steps, or collectives where no step is counted) of a
    rank's whole-run history: medians per unit of the wall time and its parts."""

    first: int  # the block's first step (or collective) number
    start: float
    end: float
    units: int
    wall: float
    collective: float = 0.0
    data: float = 0.0
    sync: float = 0.0
    delay: float | None = None  # median run-queue delay of a step; None where not known

    @property
    def compute(self) -> float:
        return max(0.0, self.wall - self.collective - self.data - self.sync)


UNIT_STEPS = "steps"
UNIT_CALLS = "calls"


@dataclass(frozen=True)
class BlockTiming:
    """One block of consecutive steps of one rank (agent/timing_blocks.py): medians of its
    steps, in seconds. `block` is step // the block size, the same on every rank."""

    block: int
    first: int  # its first step timed
    start: float  # when that step began, on the rank's clock
    steps: int  # steps timed in it
    wall: float
    collective: float = 0.0
    data: float = 0.0
    sync: float = 0.0
    work: float = 0.0  # wall time outside collectives
    compute: float = 0.0  # outside every wait
    own_data: float | None = None  # median StepTiming.own_data; None where not known


@dataclass(frozen=True)
class LoaderTiming:
    """A DataLoader a rank waited on: its dataset's class, workers, the user's line."""

    dataset: str | None
    num_workers: int | None
    site: str | None
    batches: int
    wait: float


@dataclass(frozen=True)
class SiteTiming:
    """A user call site: how often it was seen, seconds spent there (host syncs)."""

    site: str
    count: int
    seconds: float = 0.0


@dataclass(frozen=True)
class RankTiming:
    calls: tuple[CallTiming, ...] = ()  # oldest first
    steps: tuple[StepTiming, ...] = ()  # oldest first
    loaders: tuple[LoaderTiming, ...] = ()
    syncs: tuple[SiteTiming, ...] = ()  # host-sync call sites, most seconds first
    work: tuple[SiteTiming, ...] = ()  # where the main thread worked, most seen first
    flight: tuple[FlightCallTiming, ...] = ()  # Flight Recorder collectives, oldest first
    history: tuple[StepBlock, ...] = ()  # the whole run in blocks, oldest first
    history_unit: str = UNIT_STEPS  # UNIT_CALLS: blocks of collectives (no step counted)
    blocks: tuple[BlockTiming, ...] = ()  # the whole run, a row per block of steps, oldest first


# Where a sampled main-thread stack was (RankProfile counts).
WHERE_COLLECTIVE = "collective"
WHERE_DATA = "data"
WHERE_OTHER = "other"


@dataclass(frozen=True)
class RankProfile:
    """`mldebug dump --profile`: one rank's main thread sampled for a few seconds."""

    rank: int
    pid: int
    samples: int = 0
    collective: int = 0
    data: int = 0
    top_frames: tuple[tuple[str, int], ...] = ()  # user file:line outside collectives, count
    failure: str | None = None  # why it could not be sampled (FAIL_* of model.py)
    failure_detail: str = ""

    @property
    def other(self) -> int:
        return max(0, self.samples - self.collective - self.data)


@dataclass(frozen=True)
class TimingRow:
    """One rank's line of the timing table."""

    rank: int
    step_time: float | None = None  # median seconds a step (agent); None: not known
    waiting: float | None = None  # shares of the step (or of the samples), 0..1
    data: float | None = None
    sync: float | None = None
    compute: float | None = None
    last_share: float | None = None  # share of collectives it arrived at last
    arrival: int | None = None  # 1 = arrives last most often
    step_times: tuple[float, ...] = ()  # the window's step times, oldest first (sparkline)
    samples: int | None = None  # --profile: samples behind the shares
    straggler: bool = False


@dataclass(frozen=True)
class TimingTable:
    source: str  # "agent" (state.json) or "sampling" (dump --profile)
    rows: tuple[TimingRow, ...] = ()
    collectives: int = 0  # collectives compared across ranks (agent) / samples a rank (sampling)
    note: str = ""  # how sure, or why nothing is judged


@dataclass(frozen=True)
class SampledStacks:
    """`mldebug dump --profile`: one rank's main-thread stacks sampled by py-spy, counted."""

    rank: int
    pid: int
    stacks: tuple[tuple[tuple[tuple[str, str, int | None], ...], int], ...] = ()
    # each: ((function, file, line) outermost first, how many samples)
    seconds: float = 0.0
    failure: str | None = None  # FAIL_* of model.py
    failure_detail: str = ""
    # The samples in the order taken, each an index into `stacks` (empty when not known):
    # what the rank did second by second, so a pause now and then is told from a slow rank.
    timeline: tuple[int, ...] = ()
