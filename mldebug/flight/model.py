"""What one Flight Recorder dump says, as plain frozen dataclasses (read by flight/read.py).

torch's Flight Recorder keeps, per process, a ring of the last collectives its process
groups issued (2,000 by default, NCCL and gloo alike). A dump is one rank's view: its
groups (`pg_config`), per group the last enqueued / started / completed sequence number
(`pg_status`), and the entries themselves.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

FORMAT_PICKLE = "pickle"
FORMAT_JSON = "json"


class FlightEntry(NamedTuple):
    """One collective (or point-to-point op) as one rank recorded it. A named tuple, not a
    frozen dataclass: as immutable, and made five times faster (a dump holds thousands)."""

    group: str  # the group's name (process_group[0]): the same on every rank
    group_desc: str  # its description ("default_pg", "undefined", a user's desc)
    pg_id: int | None
    seq: int  # collective_seq_id (p2p_seq_id for point-to-point ops)
    p2p: bool
    op: str  # "all_reduce" (profiling_name without its "nccl:"/"gloo:" prefix)
    backend: str  # "nccl", "gloo", or "" when the name carried none
    input_sizes: tuple[tuple[int, ...], ...]
    output_sizes: tuple[tuple[int, ...], ...]
    input_dtypes: tuple[str, ...]
    output_dtypes: tuple[str, ...]
    state: str  # "scheduled", "started", "completed" (gloo stays at "scheduled")
    retired: bool
    completed: bool  # finished, by its state, its retirement or the group's status
    created: float | None  # time_created_ns in seconds since the epoch
    timeout_ms: int | None
    location: str | None  # file:line of the innermost frame outside torch, when recorded
    record_id: int | None
    duration: float | None = None  # duration_ms in seconds, where timing was on (NCCL)


@dataclass(frozen=True)
class FlightGroup:
    """A process group as one dump describes it."""

    name: str
    desc: str
    ranks: tuple[int, ...] | None  # None where the dump does not say (gloo on torch 2.13)
    last_enqueued: int | None = None
    last_started: int | None = None
    last_completed: int | None = None


@dataclass(frozen=True)
class FlightTally:
    """What a dump's summary says of its entries, counted while it was read
    (flight_summary.py): a few values per group, whatever the ring's length."""

    count: int  # entries kept
    backends: tuple[str, ...]  # named by any entry, sorted
    # per group with collectives: (group, last op, its seq, completed, location, not completed)
    groups: tuple[tuple[str, str, int, bool, str | None, int], ...]

    def group(self, name: str) -> tuple[str, str, int, bool, str | None, int] | None:
        return next((g for g in self.groups if g[0] == name), None)


@dataclass(frozen=True)
class FlightDump:
    """One rank's Flight Recorder dump."""

    path: str
    rank: int | None  # from the file name (<prefix><rank>), or the only member of its world
    format: str  # FORMAT_PICKLE or FORMAT_JSON
    version: str  # the dump format's version ("2.10")
    comm_lib_version: str  # NCCL's version; "" for gloo
    groups: tuple[FlightGroup, ...]
    entries: Sequence[FlightEntry]  # a tuple, or a column table (flight_table.EntryTable)
    repaired: bool = False  # its pg_config was rebuilt from the entries (the gloo quirk)
    dropped: int = 0  # entries left out: malformed, or past the reader's cap
    tally: FlightTally | None = None  # counted by the reader; None: count from the entries

    def group(self, name: str) -> FlightGroup | None:
        for group in self.groups:
            if group.name == name:
                return group
        return None
