"""What NCCL's RAS said about a job, as plain frozen dataclasses (read by ras/read.py, asked by
collect/ras.py, judged by ras/verdict.py).

NCCL 2.24+ runs a RAS thread in every process; asked over its client socket (what the
`ncclras` tool does) it reports, per communicator, each rank's host, pid and CUDA device,
its status, and how many collectives of each type it has *launched* (2.26+; 2.24-2.25 keep
one count for all types), and the ranks that did not answer. The text form names only the
outliers of a count mismatch; the JSON form (2.28.7+) lists every rank.
"""

from __future__ import annotations

from dataclasses import dataclass

FORMAT_TEXT = "text"
FORMAT_JSON = "json"
# 2.24-2.25 count every collective type together: its op is this name.
ALL_OPS = "collective"


@dataclass(frozen=True)
class RasRank:
    """One rank of a communicator as RAS described it."""

    rank: int  # the rank in this communicator (the world's rank for the world's)
    host: str = ""  # the node's address as RAS prints it (an IP), "" where not said
    pid: int | None = None
    cuda_dev: int | None = None
    counts: tuple[tuple[str, int], ...] = ()  # (op, launched up to) in NCCL's order
    status: str = ""  # RUNNING, INIT, FINALIZE, ABORT; "" where not said
    missing: bool = False  # in the communicator, but RAS had no data from it
    dead: bool = False  # RAS considers its process dead

    def count(self, op: str) -> int | None:
        for name, value in self.counts:
            if name == op:
                return value
        return None


@dataclass(frozen=True)
class RasCountGroup:
    """Ranks of one communicator that launched the same number of one collective type."""

    op: str  # "AllGather", "AllReduce"... (ALL_OPS before 2.26)
    launched: int  # "launched up to operation N" (0: none launched)
    ranks: int  # how many ranks
    listed: tuple[int, ...]  # the ranks named (the text form names outliers only)


@dataclass(frozen=True)
class RasComm:
    """One communicator (the text form: one `#G-I` of the report)."""

    label: str  # "#0-0" (text) or "#0" (JSON, by position)
    hash: str  # NCCL's commHash, as printed
    size: int | None  # ranks in the communicator
    status: str  # RUNNING, INIT, ... (the text table's; the most common in the JSON)
    errors: str  # OK, MISMATCH, INCOMPLETE, ERROR (comma-joined) as the table says
    ranks: tuple[RasRank, ...]  # every rank (JSON), the ranks named (text)
    missing: tuple[RasRank, ...]  # ranks RAS had no data from
    count_groups: tuple[RasCountGroup, ...]  # per op whose counts differ, biggest first
    complete: bool  # every rank's counts are known (the JSON form)

    def launches(self) -> dict[str, dict[int, int]]:
        """Per collective type, each known rank's launch count: what a sequence comparison
        takes (which ranks launched op N). The text form knows only the ranks it named."""
        out: dict[str, dict[int, int]] = {}
        for rank in self.ranks:
            for op, count in rank.counts:
                out.setdefault(op, {})[rank.rank] = count
        return out


@dataclass(frozen=True)
class RasReport:
    """One answer of RAS, saved (`ncclras > file`) or asked live."""

    path: str  # the file, or "host:port" when asked live
    format: str  # FORMAT_TEXT or FORMAT_JSON
    nccl_version: str
    cuda_runtime: int | None
    cuda_driver: int | None
    comms: tuple[RasComm, ...]
    dead: tuple[tuple[int | None, str], ...] = ()  # (pid, host) of processes RAS deems dead
    missing_processes: int = 0  # job processes RAS had no communicator data from
    timeouts: int = 0  # timeouts RAS met while gathering
    repaired: str = ""  # what was mended to read it (the 2.28.7-2.28.9 JSON)
    dropped: int = 0  # lines or entries left out: malformed, or past a cap
