"""torch's Flight Recorder dumps: read them safely, summarise each rank, compare the ranks.

The entry points `mldebug nccl` and `dump --run` use (docs/flight-recorder.md):
    looks_like_flight_dump(path, head)  is this file a dump (pickle or JSON)?
    read_flight_dump(path)              -> FlightDump, or FlightDumpError (one line)
    compare_flight_dumps(dumps)         -> [Finding] across ranks
    summarize_flight_dump(dump)         -> lines about one rank (from the counts the
                                           reader made: the entries are not walked again)
"""

from __future__ import annotations

from mldebug.textsafe import one_line

from .compare import compare_flight_dumps
from .model import FlightDump, FlightEntry, FlightGroup
from .read import FlightDumpError, looks_like_flight_dump, read_flight_dump
from .summary import tally_entries

__all__ = [
    "FlightDump",
    "FlightDumpError",
    "FlightEntry",
    "FlightGroup",
    "compare_flight_dumps",
    "looks_like_flight_dump",
    "read_flight_dump",
    "summarize_flight_dump",
]

MAX_GROUP_LINES = 16


def _group_label(name: str, desc: str) -> str:
    return name if not desc or desc in ("undefined", name) else f"{name} ({desc})"


def summarize_flight_dump(dump: FlightDump) -> list[str]:
    """A header line for the rank, then one line per process group: its last collective,
    what completed, and how many entries never did."""
    who = f"rank {dump.rank}" if dump.rank is not None else "unknown rank"
    tally = dump.tally if dump.tally is not None else tally_entries(dump.entries)
    facts = [f"{tally.count} entries", f"format {dump.version or '?'} ({dump.format})"]
    if tally.backends:
        facts.append("/".join(tally.backends))
    if dump.comm_lib_version:
        facts.append(f"NCCL {dump.comm_lib_version}")
    if dump.repaired:
        facts.append("pg_config rebuilt from the entries (gloo quirk)")
    if dump.dropped:
        facts.append(f"{dump.dropped} malformed entries skipped")
    lines = [one_line(f"{who}: Flight Recorder {dump.path}: " + ", ".join(facts))]
    for group in dump.groups[:MAX_GROUP_LINES]:
        mine = tally.group(group.name)
        pending = 0
        text = f"  group {_group_label(group.name, group.desc)}"
        if group.ranks is not None:
            text += f" of {len(group.ranks)} ranks"
        if mine is None:
            text += ": no collectives recorded"
        else:
            _, op, seq, completed, location, pending = mine
            state = "completed" if completed else "not completed"
            at = f" at {location}" if location else ""
            text += f": last {op} #{seq} ({state}){at}"
        if (group.last_completed or -1) >= 0 and (group.last_enqueued or -1) >= 0:
            text += f"; enqueued #{group.last_enqueued}, completed #{group.last_completed}"
        if pending:
            text += f"; {pending} not completed"
        lines.append(one_line(text))
    if len(dump.groups) > MAX_GROUP_LINES:
        lines.append(f"  ... {len(dump.groups) - MAX_GROUP_LINES} more groups")
    return lines
