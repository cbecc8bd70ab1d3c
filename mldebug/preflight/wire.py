"""The output format of `mldebug check`'s rank program, one rule in one place.

Each rank of a check prints its results as lines of its standard output, each a marker and
one JSON object (docs/check.md, "Output format"):

    MLDEBUG-CHECK {"v": 1, "phase": "start", "rank": 0, "host": "gpu017", ...}

The rank program (mldebug/preflight/rank.py) writes them with `encode`; the front end
(mldebug/collect/checklines.py) reads them back with `decode`, from the ranks' logs, from a
launcher's combined output or from a paste. A line is data: bounded in length, its JSON
depth checked, anything else is not a record. Standard library only: it runs in the ranks.
"""

from __future__ import annotations

import json

MARKER = "MLDEBUG-CHECK "
VERSION = 1
MAX_LINE = 64 << 10  # a record longer than this is not one of ours

# The phases, in the order a rank runs them. "start" says who and where the rank is;
# "connect" whether it joined the group; "collective" one op at one size, measured by the
# group (printed by its first rank); "pair" one node pair's exchange (printed by both ends);
# "compute" the best matmul rate of one dtype; "end" the rank's own time.
PHASE_START = "start"
PHASE_CONNECT = "connect"
PHASE_COLLECTIVE = "collective"
PHASE_PAIR = "pair"
PHASE_COMPUTE = "compute"
PHASE_END = "end"
PHASES = (PHASE_START, PHASE_CONNECT, PHASE_COLLECTIVE, PHASE_PAIR, PHASE_COMPUTE, PHASE_END)

# Where a rank's connection failed: the rendezvous store, the process group's init, or one
# of the first collectives.
STEPS = ("rendezvous", "membership", "init", "barrier", "all_reduce", "ring")

# The environment the check command hands its rank program (limits, not test switches).
ENV_JOIN_TIMEOUT = "MLDEBUG_CHECK_JOIN_TIMEOUT"  # seconds the group waits for ranks to join
ENV_OP_TIMEOUT = "MLDEBUG_CHECK_OP_TIMEOUT"  # seconds one collective may take
ENV_BANDWIDTH_SECONDS = "MLDEBUG_CHECK_BANDWIDTH_SECONDS"  # the collective phase's budget
ENV_COMPUTE_SECONDS = "MLDEBUG_CHECK_COMPUTE_SECONDS"  # each dtype's matmul window
ENV_MAX_BYTES = "MLDEBUG_CHECK_MAX_BYTES"  # the largest collective buffer


def encode(record: dict) -> str:
    """One output line (without its newline) for `record`."""
    return MARKER + json.dumps({"v": VERSION, **record}, separators=(",", ":"))


def _depth_ok(value: object, limit: int = 6) -> bool:
    if limit < 0:
        return False
    if isinstance(value, dict):
        return all(_depth_ok(v, limit - 1) for v in value.values())
    if isinstance(value, list):
        return all(_depth_ok(v, limit - 1) for v in value)
    return True


def decode(line: str) -> dict | None:
    """The record a line carries, or None: not ours, too long, not JSON, another version,
    an unknown phase, or no integer rank. Text before the marker (a launcher's prefix) is
    allowed."""
    if len(line) > MAX_LINE:
        return None
    at = line.find(MARKER)
    if at < 0:
        return None
    try:
        record = json.loads(line[at + len(MARKER) :])
    except ValueError:
        return None
    if not isinstance(record, dict) or not _depth_ok(record):
        return None
    if record.get("v") != VERSION or record.get("phase") not in PHASES:
        return None
    rank = record.get("rank")
    if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < 1 << 20:
        return None
    return record
