"""The model: plain frozen dataclasses that flow from collectors to analysis to views.

What was found (`JobTargets`), what was read (`JobReadings`, `RunFiles`), and what the
analysis made of it (`JobSnapshot`). No I/O and no UI imports here. Stacks are stored outermost frame first, like a Python
traceback: `frames[-1]` is the line the thread is on right now.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from mldebug.model.timing import RankTiming, TimingTable

# What a collector could not do for one rank (StackSample.failure).
FAIL_EXITED = "exited"  # the process is gone (before or during the dump)
FAIL_PERMISSION = "permission"  # ptrace refused, or another user's process
FAIL_TIMEOUT = "timeout"  # py-spy did not answer within the time given to one rank
FAIL_NOT_PYTHON = "not_python"  # no Python interpreter found in the process
FAIL_UNSUPPORTED = "unsupported"  # py-spy does not support this Python (3.15, free-threaded)
FAIL_ERROR = "error"  # anything else py-spy reported
FAIL_BUSY = "busy"  # another reader (py-spy, gdb, mldebug of this user) held it all the time given

# What a rank is doing (RankView.state).
STATE_RUNNING = "running"  # its stack moves, or it burns CPU: working
STATE_STUCK = "stuck"  # same stack in every sample, idle: waiting
STATE_EXITED = "exited"
STATE_UNREADABLE = "unreadable"  # alive, but its stack could not be read
STATE_MISSING = "missing"  # part of the world size, but no process was found
STATE_UNKNOWN = "unknown"  # one sample only: cannot tell stuck from running
# Its agent says it called a collective that has not completed for a while, whatever its
# stack or CPU shows (on NCCL a rank waits at a later sync point, often spinning).
STATE_WAITING = "waiting"
# No process to read: it ended, or none was found for its rank.
GONE_STATES = frozenset({STATE_EXITED, STATE_MISSING})

# Finding kinds (the `kind` of a Finding; stable, scripts match on them).
KIND_OUTLIER = "outlier"  # most ranks wait in a collective, a few are elsewhere
KIND_MISMATCH = "mismatch"  # ranks in different collectives, or one op from different sites
KIND_MISSING = "missing"  # ranks of the world size that are not there
KIND_RENDEZVOUS = "rendezvous"  # everyone waits in init_process_group / the store
KIND_HANG = "hang"  # every rank waits in the same collective, none is elsewhere
KIND_UNREADABLE = "unreadable"  # ranks whose stacks could not be read
KIND_PROGRESSING = "progressing"  # informational: the job is working, not hung
KIND_COMPILING = "compiling"  # informational: ranks inside torch.compile, slow not hung
KIND_CRASH = "crash"  # a rank ended by an exception or a signal: the root cause of what follows
KIND_STUCK = "stuck"  # ranks that do not move, outside any collective, nobody waits on them
KIND_ENDED = "ended"  # informational: every rank has exited with code 0, the job is over
KIND_THREADS = "threads"  # some ranks lack a thread (by the function it runs) the others have
KIND_FROZEN = "frozen"  # the process lives but its agent's heartbeat stopped: C code holds the GIL
KIND_NONFINITE = "nonfinite"  # --detect-anomaly: the first NaN/Inf's rank, step and module
KIND_MEMORY_GROWTH = "memory_growth"  # a rank's memory grew at each of its last steps
KIND_MEMORY_OUTLIER = "memory_outlier"  # a rank uses far more memory than the others
KIND_MEMORY_CENSUS = "memory_census"  # informational: a census of live tensors asked for
KIND_NODE_UNREACHABLE = "node_unreachable"  # a node did not answer `mldebug collect`
KIND_POD_NOT_RUNNING = "pod_not_running"  # Kubernetes: a pod of the job is not running yet
KIND_POD_RESTARTS = "pod_restarts"  # Kubernetes: a pod's training container restarted
KIND_NODE_NOT_READY = "node_not_ready"  # Kubernetes: a node that holds the job's pods
KIND_FR_INCOMPLETE = "fr_incomplete"  # Flight Recorder: a collective all entered never completed
KIND_FR_UNREAD = "fr_unread"  # Flight Recorder dumps of a run left unread for time (`dump`)
# From NCCL debug logs and torch.distributed's error text (mldebug.nccl, `mldebug nccl`).
KIND_NCCL_TIMEOUT = "nccl_timeout"  # a watchdog timeout; the rank that never enqueued the work
KIND_NCCL_INIT = "nccl_init"  # a communicator init that never reached Init COMPLETE
KIND_NCCL_NETWORK = "nccl_network"  # a rank on another transport or interface than the rest
KIND_NCCL_VERSION = "nccl_version"  # ranks on different NCCL / CUDA versions
KIND_NCCL_WARNING = "nccl_warning"  # NCCL WARN lines, grouped across ranks
KIND_CONNECTION = "connection"  # connection refused / closed by peer / store clients missing
KIND_DIST_ERROR = "dist_error"  # gloo and c10d errors: size mismatch, monitored barrier, ...
KIND_NATIVE_CRASH = "native_crash"  # a rank died by a signal: its core's signal and crashing thread
KIND_NATIVE_THREADS = "native_threads"  # threads without Python frames (gdb) wait in a collective
KIND_SLOW_DEVICE = "slow_device"  # `check`: a rank's matmul rate far below the median rank's
KIND_SLOW_LINK = "slow_link"  # `check`: a node pair's bandwidth far below the median pair's
KIND_CHECK_OK = "check_ok"  # informational: `check` found no failure and no outlier
# A fact (Finding.facts) of an outlier whose ranks are still busy on their way to the
# rendezvous the others wait in (its value: the op); graded as start-up (analysis/severity).
FACT_STARTING = "starting"
# ...of an outlier whose ranks are busy loading a module (its value: the module); graded so too.
FACT_IMPORTING = "importing"

# What saw a finding (Finding.sources): each source of evidence of a look.
SOURCE_STACKS = "stacks"  # py-spy (or the rank's own faulthandler) stacks
SOURCE_AGENT = "agent"  # the agent's collective ledger and state.json
SOURCE_FLIGHT = "flight_recorder"  # torch's Flight Recorder dumps
SOURCE_WATCHDOG = "watchdog"  # ProcessGroupNCCL's watchdog and timeout lines
SOURCE_EXIT = "exit"  # the ranks' last states when they died (run.json, error files)
SOURCE_RAS = "ras"  # NCCL's RAS launch counts
SOURCE_GDB = "gdb"  # native threads read by gdb
SOURCE_SAMPLING = "sampling"  # dump --profile's stack sampling
SOURCE_TIMING = "timing"  # the agent's step and collective timings
SOURCE_MEMORY = "memory"  # the agent's memory readings
SOURCE_LOGS = "logs"  # NCCL and torch log lines, error files, pasted text
SOURCE_NODES = "nodes"  # the several-nodes front end (a node that did not answer)

SEVERITY_ERROR = "error"
SEVERITY_WARNING = "warning"
SEVERITY_INFO = "info"


@dataclass(frozen=True)
class Frame:
    function: str
    file: str  # the path as the target process saw it
    line: int | None = None  # native frames may have none
    native: bool = False

    @property
    def location(self) -> str:
        return f"{self.file}:{self.line}" if self.line is not None else self.file


@dataclass(frozen=True)
class ThreadStack:
    thread_id: int
    name: str
    frames: tuple[Frame, ...]  # outermost first
    os_thread_id: int | None = None
    active: bool = False  # on CPU (not in a wait) when sampled
    owns_gil: bool = False
    pid: int | None = None  # the process it runs in, when not the rank's own (DataLoader worker)


@dataclass(frozen=True)
class RankTarget:
    """One process to look at, and what its environment says about it."""

    pid: int
    rank: int | None = None
    world_size: int | None = None
    local_rank: int | None = None
    host: str = ""
    job: str = ""  # key that groups the ranks of one job (run dir, master addr:port, SLURM job)
    cmdline: str = ""
    run_dir: str | None = None


@dataclass(frozen=True)
class RankCrash:
    """How a rank ended badly, from the files its hook and `mldebug run` left behind."""

    rank: int
    time: float  # when the exception reached the top, else when the rank was last seen
    how: str = ""  # "uncaught exception", "killed (SIGKILL): OOM killer?", ...
    exc_type: str = ""
    message: str = ""
    location: str | None = None  # file:line, the user's own frame when known
    recipe: str = ""  # the launcher's recipe for how it failed (run.json), when it said


@dataclass(frozen=True)
class JobTargets:
    """The ranks of one job, as found (mldebug.targets), and how its run says they ended."""

    targets: tuple[RankTarget, ...]
    world_size: int | None = None
    job: str = ""
    run_dir: str | None = None
    exit_codes: dict[int, int] = field(default_factory=dict)  # rank -> code, from run.json
    # Ranks with no exit code yet whose Python shut down normally (their agent's exit.json).
    shut_down: frozenset[int] = frozenset()
    notes: tuple[str, ...] = ()  # what resolution noticed and the user should know
    partial: bool = False  # the user named some ranks only: the others are not "missing"
    # Ranks that ended badly: read from the run directory by the collect step
    # (mldebug.collect.crashes.with_crashes), not by target resolution.
    crashes: tuple[RankCrash, ...] = ()


@dataclass(frozen=True)
class StackSample:
    """One reading of one rank: its threads, or why they could not be read."""

    target: RankTarget
    time: float
    threads: tuple[ThreadStack, ...] = ()
    failure: str | None = None  # one of FAIL_*
    failure_detail: str = ""
    cpu_seconds: float | None = None  # user+system CPU time of the process at `time`
    rss_bytes: int | None = None
    main_cpu_seconds: float | None = None  # CPU time of the main thread alone at `time`
    main_run_delay: float | None = None  # seconds the main thread waited for a CPU, so far
    main_runnable: bool | None = None  # the main thread was ready to run (state R) at `time`
    # Read at an earlier poll and given again (a live view reads a rank whose agent says it
    # moves less often): the newest stack known, not a new sample of the rank.
    carried: bool = False
    # Where the threads came from when not py-spy, and why (collect/rankstacks.py): "the
    # rank itself (its agent): ptrace refused: ..."; "" for py-spy.
    source: str = ""


@dataclass(frozen=True)
class JobReadings:
    """What one poll of a job read, before any analysis: the collector's whole answer."""

    job: JobTargets
    samples: Mapping[int, tuple[StackSample, ...]]  # pid -> its readings, oldest first
    world_size: int | None = None  # the job's, capped at what one snapshot accounts for
    # rank pid -> the readings of its DataLoader worker processes in this poll (the ranks
    # seen waiting for them only); folded into the rank's newest sample by the orchestrator
    workers: Mapping[int, tuple[StackSample, ...]] = field(default_factory=dict)
    notes: tuple[str, ...] = ()  # the job's notes, then what reading it left out
    # rank pid -> its agent's state.json as read at this poll (ranks that have one)
    agents: Mapping[int, AgentState] = field(default_factory=dict)
    # rank pid -> that state.json's document as read, unparsed: kept only when asked
    # (`mldebug collect` passes it on in the node document, for the front end to parse)
    agent_files: Mapping[int, dict] = field(default_factory=dict)
    # what the ranks' agents wrote in events.jsonl (the newest; mldebug.collect.eventfiles)
    events: tuple[RankEvent, ...] = ()


@dataclass(frozen=True)
class CollectiveCall:
    """One collective or point-to-point call of a rank, as its agent recorded it."""

    group: str  # the same name on every rank: "default_pg", a torch group name, "ranks:0-1"
    seq: int  # counts this rank's calls on `group`, from 1
    op: str
    site: str | None = None  # file:line of the user's code that made the call
    enqueued: float | None = None  # when the call was made
    completed: float | None = None  # when it was known complete (None: not yet)
    asynchronous: bool = False
    shapes: tuple[tuple[int, ...], ...] = ()
    dtypes: tuple[str, ...] = ()
    error: str | None = None  # what it raised: the agent counts a call that raised as ended


@dataclass(frozen=True)
class GroupProgress:
    """Where one rank is in one process group's sequence of collectives."""

    group: str
    size: int | None
    enqueued: CollectiveCall | None  # the last call made
    completed: CollectiveCall | None  # the last call known complete


@dataclass(frozen=True)
class FlightGroup:
    """One process group as torch's own Flight Recorder showed it to the rank's agent
    (state.json's optional `flight_recorder`): its last recorded collective, and how many
    recorded entries are not retired (still pending)."""

    group: str  # the agent's name of the group ("default_pg", "1")
    seq: int  # the last entry's collective_seq_id
    op: str  # "all_reduce" (without the backend prefix)
    retired: bool  # the last entry completed
    pending: int  # entries not retired
    created: float | None = None  # when the last entry was recorded (epoch seconds)
    shapes: tuple[tuple[int, ...], ...] = ()
    dtypes: tuple[str, ...] = ()
    # torch 2.15 keeps a ring per backend: the one this came from ("gloo", "nccl2"); "" when
    # torch has one ring for all
    ring: str = ""
    read: float | None = None  # when the agent read the recorder (epoch seconds)


@dataclass(frozen=True)
class MemoryReading:
    rss: int | None = None
    cuda_allocated: int | None = None
    cuda_reserved: int | None = None
    cuda_max_allocated: int | None = None
    cuda_max_reserved: int | None = None
    cuda_num_ooms: int | None = None
    cuda_alloc_retries: int | None = None
    cuda_inactive_split: int | None = None
    nvml_used: int | None = None
    nvml_total: int | None = None


@dataclass(frozen=True)
class MemoryTimeline:
    """A rank's memory over its whole life, downsampled (state.json's `memory_timeline`),
    and what it can grow into."""

    # (time, rss, cuda allocated, step, collectives made), oldest first
    points: tuple[tuple[float, int | None, int | None, int | None, int | None], ...] = ()
    host_total: int | None = None
    host_available: int | None = None
    cgroup_max: int | None = None
    cgroup_current: int | None = None
    gpu_total: int | None = None


@dataclass(frozen=True)
class TensorHolder:
    """What keeps a tensor of a growing group alive (agent/holders.py)."""

    type: str  # "list", "dict", the class of an object
    items: int | None  # its length, for a container
    name: str | None  # the variable that holds it: "kept"
    whose: str | None  # "a local of train() at train.py:44", "a global of trainer"


@dataclass(frozen=True)
class TensorGroup:
    """Live tensors of a rank alike in shape, dtype, device, requires_grad and grad_fn."""

    shape: str  # "[]" for 0-d, "[32, 10]", or "5-d"
    dtype: str  # "float32"
    device: str  # "cpu", "cuda"
    requires_grad: bool
    grad_fn: str | None  # "MeanBackward0"
    count: int
    nbytes: int
    held_by: tuple[TensorHolder, ...] = ()  # for the groups that grew most


@dataclass(frozen=True)
class TensorCensus:
    """One census of a rank's live tensors (state.json's `memory_census`)."""

    time: float
    seconds: float  # how long it took
    partial: bool  # stopped at its time bound
    tensors: int
    groups: tuple[TensorGroup, ...] = ()
    requested: bool = False


@dataclass(frozen=True)
class CompileProgress:
    """torch.compile as the rank's agent saw it (state.json's `compile`, agent/compiles.py)."""

    since: float | None  # when the compile under way began (agent's clock); None: none
    phase: str | None  # what compiles then: "torch._inductor (C++ build)"
    count: int  # compiles seen so far
    seconds: float  # in the compiles that ended
    longest: float  # the longest of them
    ended: float | None = None  # when the last compile was seen ended (agent's clock)


@dataclass(frozen=True)
class AgentState:
    """A rank's ranks/<rank>/state.json (docs/agent.md), as read: the in-rank view."""

    rank: int
    pid: int | None
    time: float  # the heartbeat: when the agent last wrote the file
    started: float | None = None
    interval: float | None = None  # seconds between two heartbeats, when the file says
    step: int | None = None
    step_time: float | None = None
    groups: tuple[GroupProgress, ...] = ()
    trace: tuple[CollectiveCall, ...] = ()  # the last calls, oldest first
    memory: MemoryReading | None = None
    memory_history: tuple[tuple[int | None, float, int | None, int | None], ...] = ()
    flight: tuple[FlightGroup, ...] = ()  # torch's Flight Recorder, while the rank looked stuck
    timeline: MemoryTimeline | None = None  # memory over time (collect/memstate.py)
    census: TensorCensus | None = None  # the newest census of its live tensors
    census_before: TensorCensus | None = None  # the one before it
    timing: RankTiming | None = None  # where its steps' time goes (model/timing.py)
    compile: CompileProgress | None = None  # torch.compile, once the agent saw one
    exiting: bool = False  # its last state, written as the interpreter exits
    # Seconds its heartbeat thread or main thread waited for a CPU since the state was
    # written, read by the dump (collect/agentstate.py): a late heartbeat on a starved node
    waited_for_cpu: float | None = None
    # Seconds its main thread waited for a CPU since its step under way began (the same
    # counter, read by the dump, less its value at the step's start): a pause a busy node
    # stretched (analysis/severity.py)
    step_waited_for_cpu: float | None = None

    @property
    def progress(self) -> tuple[int, int, int]:
        """What moves while the rank works: (step, collective calls made, calls completed),
        summed over its groups. Two readings with the same value: the rank made no progress
        in between (whatever its heartbeat did)."""
        made = sum(g.enqueued.seq for g in self.groups if g.enqueued is not None)
        done = sum(g.completed.seq for g in self.groups if g.completed is not None)
        return (-1 if self.step is None else self.step, made, done)


@dataclass(frozen=True)
class RankView:
    """What analysis concluded about one rank, for the views."""

    rank: int
    target: RankTarget | None
    state: str  # one of STATE_*
    threads: tuple[ThreadStack, ...] = ()
    user_frame: Frame | None = None  # innermost frame of the user's own code
    collective: str | None = None  # torch.distributed op the main thread is in
    cpu_percent: float | None = None
    rss_bytes: int | None = None
    exit_code: int | None = None
    # Its Python shut down normally (exit.json), its exit code not recorded yet: it makes no
    # further collective, whatever its process still does in its native teardown.
    shut_down: bool = False
    detail: str = ""  # why unreadable / how it exited
    step: int | None = None  # from the in-rank agent, when there is one
    heartbeat_age: float | None = None
    agent: AgentState | None = None  # the rank's state.json, when its agent writes one
    # The rank waits for its DataLoader: pid of the worker process whose line user_frame is.
    dataloader_worker: int | None = None
    stack_source: str = ""  # StackSample.source of its threads: "" for py-spy

    @property
    def gone(self) -> bool:
        """No process to read any more, or none found (GONE_STATES)."""
        return self.state in GONE_STATES


@dataclass(frozen=True)
class StackNode:
    """A node of the merged prefix tree over all ranks' main-thread stacks."""

    frame: Frame | None  # None for the root
    ranks: tuple[int, ...]
    children: tuple[StackNode, ...] = ()


@dataclass(frozen=True)
class StackGroup:
    """An equivalence class: ranks whose main threads have the same stack."""

    ranks: tuple[int, ...]
    frames: tuple[Frame, ...]
    user_frame: Frame | None = None
    collective: str | None = None
    state: str = STATE_UNKNOWN


@dataclass(frozen=True)
class FindingPart:
    """One side of a finding (a mismatch names each group: its ranks, op and location)."""

    ranks: tuple[int, ...]
    label: str  # what these ranks are doing, e.g. "all_gather" or "load_shard"
    location: str | None = None  # file:line


@dataclass(frozen=True)
class CollectiveRef:
    """The collective a finding is about: its group, its number on that group (the ledger's
    sequence number, where known) and its op."""

    group: str
    seq: int | None = None
    op: str | None = None


@dataclass(frozen=True)
class Finding:
    """What the analysis found, as data: code ranks, de-duplicates and merges findings by
    these fields. `summary`, `detail`, `then` and `since` are words for people, read by views only
    (tests/test_findings_as_data.py holds every other module to that)."""

    kind: str  # one of KIND_*
    ranks: tuple[int, ...]  # the culprits: the ranks the finding is about
    summary: str  # one sentence a person can act on
    location: str | None = None  # file:line
    recipe: str | None = None  # id of the recipe that explains what to do
    detail: str = ""
    severity: str = SEVERITY_ERROR
    parts: tuple[FindingPart, ...] = ()  # the groups a mismatch or outlier is made of
    waiting: tuple[int, ...] = ()  # the ranks that wait for the culprits
    waited: float | None = None  # seconds the waiting ranks have waited (the longest), if known
    collective: CollectiveRef | None = None  # the collective it is about, where one is
    sources: tuple[str, ...] = ()  # SOURCE_*: what saw it (several, once the judge merged)
    facts: tuple[tuple[str, str], ...] = ()  # (name, value) pairs: exit code, limit, signal...
    confidence: float | None = None  # how sure a reader of text is (explain): 0..1
    then: str = ""  # words a later step adds to the sentence (the thread a rank lost)
    since: str = ""  # the judge's words on how long the wait has lasted (views append them)


@dataclass(frozen=True)
class JobSnapshot:
    """Everything a view shows about a job at one moment."""

    time: float
    ranks: tuple[RankView, ...]
    groups: tuple[StackGroup, ...] = ()
    tree: StackNode = field(default_factory=lambda: StackNode(None, ()))
    findings: tuple[Finding, ...] = ()
    world_size: int | None = None
    job: str = ""
    run_dir: str | None = None
    timing: TimingTable | None = None  # per rank where the time goes (analysis/timing.py)


@dataclass(frozen=True)
class SourceFindings:
    """What one more source said of a look, for the judge (analysis/judge.py): the findings
    its reader made of its own evidence (run files, NCCL RAS, gdb, sampling), notes for the
    user, the kinds its direct measurement replaces, and a timing table that replaces the
    agent's (sampling)."""

    found: tuple[Finding, ...] = ()
    notes: tuple[str, ...] = ()
    replaces: frozenset[str] = frozenset()
    timing: TimingTable | None = None


# ---- the run directory's files, as the live view reads them (mldebug.live.runfiles) ----


@dataclass(frozen=True)
class LogTail:
    rank: int
    stream: str  # "stdout" or "stderr"
    lines: tuple[str, ...]


@dataclass(frozen=True)
class RankEvent:
    """One line of `<run>/ranks/<rank>/events.jsonl` (written by the in-rank agent)."""

    rank: int
    time: float | None
    kind: str
    message: str
    location: str | None = None
    step: int | None = None  # the rank's step when it was written
    # The line's other fields (module, what, trail, rate...), as text to show, in its order.
    fields: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class RunFiles:
    """The run directory's files as of one poll."""

    root: str
    logs: tuple[LogTail, ...] = ()
    events: tuple[RankEvent, ...] = ()
    bad_event_lines: int = 0  # lines that were not JSON objects (skipped, counted)
    nccl: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (file name, last lines)
    nccl_files_total: int = 0
    # What mldebug.nccl makes of the run's NCCL logs, stderr tails and Flight Recorder dumps.
    nccl_findings: tuple[Finding, ...] = ()
    nccl_summary: tuple[str, ...] = ()  # a few lines per rank


# ---- several nodes, each read by `mldebug collect` (mldebug.cluster) ----


@dataclass(frozen=True)
class NodeReading:
    """One node's answer to `mldebug collect`: its ranks as that node's analysis saw them
    (state from several samples, stack, agent), and the distinct main-thread stacks with
    their ranks (the node's merged classes)."""

    host: str
    time: float
    views: tuple[RankView, ...]
    groups: tuple[StackGroup, ...] = ()
    world_size: int | None = None
    job: str = ""
    notes: tuple[str, ...] = ()
    crashes: tuple[RankCrash, ...] = ()  # how its ranks ended badly (their run directory)
    events: tuple[RankEvent, ...] = ()  # what its ranks' agents noticed (NaN/Inf...)
    ras: tuple[str, str] | None = None  # NCCL RAS's answer there: (source, text), unread
    failures: Mapping[int, str] = field(default_factory=dict)  # rank -> FAIL_* of its reading
    hang_after: float | None = None  # the wait its run's --hang-timeout makes a hang


@dataclass(frozen=True)
class NodeFailure:
    """A node that gave no usable answer, and what is known of its ranks without it."""

    host: str
    reason: str  # "timed out after 30 s", "ssh: connect refused", ...
    ranks: tuple[int, ...] = ()  # the ranks the scheduler placed there, when it says
    scheduler_state: str = ""  # what SLURM says of the node or job (squeue/scontrol)
    recipe: str = "node-unreachable"  # what to do (k8s-exec: a pod refused kubectl exec)
    pod: bool = False  # `host` is a Kubernetes pod (--k8s), not a machine


# ---- what Kubernetes says of a job's pods (mldebug.cluster.k8spods) ----


@dataclass(frozen=True)
class ContainerEnd:
    """How a container's run ended (a pod's containerStatuses[].state/lastState.terminated)."""

    reason: str  # OOMKilled, Error, Completed, ContainerStatusUnknown, ...
    exit_code: int | None = None
    signal: int | None = None
    finished: float | None = None  # epoch seconds
    message: str = ""


@dataclass(frozen=True)
class PodStory:
    """One pod of the job as the API server tells it: where it runs, which ranks the
    controller's environment gives it, and how its training container fared."""

    name: str
    ranks: tuple[int, ...] = ()  # from RANK/PET_NODE_RANK/PET_NPROC_PER_NODE...; () unknown
    node: str = ""  # spec.nodeName; "" while unscheduled
    phase: str = ""  # Pending, Running, Succeeded, Failed, Unknown
    container: str = ""  # the training container
    running: bool = False  # the training container runs now
    restarts: int = 0
    ended: ContainerEnd | None = None  # the container's current state, when terminated
    last_end: ContainerEnd | None = None  # how its run before the latest restart ended
    waiting: str = ""  # "CrashLoopBackOff: back-off 5m0s restarting failed container"
    memory_limit: int | None = None  # bytes (resources.limits.memory)
    reason: str = ""  # the pod's status.reason (Evicted, ...)
    message: str = ""  # the pod's status.message
    unschedulable: str = ""  # why the scheduler did not place it (PodScheduled=False)
    node_problem: str = ""  # its node's Ready condition when not True: "NotReady: ..."
    warnings: tuple[str, ...] = ()  # its Warning events, newest last: "BackOff: ..."


# ---- native stacks of every thread, read with gdb (mldebug.collect.gdb) ----


@dataclass(frozen=True)
class NativeThread:
    """One OS thread of a process as gdb saw it: native frames, outermost first."""

    lwp: int  # the kernel's thread id (py-spy's os_thread_id)
    name: str  # /proc/PID/task/TID/comm when live, else gdb's name ("" in a core)
    frames: tuple[Frame, ...]
    # Python frames on this thread, outermost first: py-spy's for a live rank (matched by
    # lwp), else CPython's gdb extension (py-bt); empty for a thread that runs no Python.
    python_frames: tuple[Frame, ...] = ()
    python_name: str = ""  # the threading.Thread name py-spy gives it
    crashed: bool = False  # the thread that received the fatal signal (a core)
    # What the analysis makes of it (analysis.native.placed): the name it is shown by, and
    # the innermost frame outside the C runtime's wait, where it is in its own code.
    label: str = ""
    waits_in: Frame | None = None


@dataclass(frozen=True)
class NativeGroup:
    """Threads of several ranks that wait in the same place under the same name."""

    name: str  # thread name (comm), or the Python thread's name
    python: bool  # the threads run Python code
    waits_in: Frame | None
    ranks: tuple[int, ...]
    count: int  # threads in the group (a rank may have several: gloo's two run loops)
    frames: tuple[Frame, ...]  # one member's native frames, outermost first
    python_frames: tuple[Frame, ...] = ()
    collective: str | None = None


@dataclass(frozen=True)
class NativeDump:
    """Every thread of one rank from gdb (a live process or a core file), or why not."""

    rank: int | None
    pid: int | None
    threads: tuple[NativeThread, ...] = ()
    failure: str | None = None  # one of FAIL_*
    failure_detail: str = ""
    core: str | None = None  # the core file read
    executable: str | None = None
    signal: str | None = None  # "SIGABRT", the signal that ended the process (a core)
    python_bt: bool = False  # Python frames came from CPython's gdb extension
    notes: tuple[str, ...] = ()  # what the reading could not do (no py-bt, a mismatch...)
    seconds: float = 0.0  # how long gdb took
