"""torch 2.15's Flight Recorder keeps one ring per backend: the agent reads every ring the
job's process groups may use, and says which one each group's entries came from.

No NCCL runs here, so the NCCL side is a stand-in module built from torch 2.15's own
signatures (torch/_C/_distributed_c10d.pyi and the docstrings of the 2.15.0 wheel: the
`backend: str = 'gloo'` keyword, an unknown ring dumped empty) and fed entries in the
layout torch 2.15's dump writes (format "2.10", recorded from the real wheel's gloo ring),
with entries only under the nccl2 ring: the ring the "nccl" backend (ProcessGroupNCCL2,
through its FlightRecorderHook) records into. A test in test_compat.py runs the same read
on the real 2.15 wheel's gloo ring.
"""

from __future__ import annotations

import json
import pickle
import sys
import types

import pytest
from testkit.agent_states import state

from mldebug.agent import flight, timing_flight
from mldebug.collect.agentstate import parse_state

pytestmark = pytest.mark.compat  # cheap; .ci/compat runs it beside the 2.15 wheel

# The first line of the 2.15 wheel's docstrings, as pybind writes them.
SIGNATURE_JSON = (
    "_dump_fr_trace_json(includeCollectives: bool | None = None, onlyActive: bool | None = "
    "None, backend: str = 'gloo') -> bytes\n\n\n        Arguments: ..."
)
SIGNATURE_PICKLE = (
    "_dump_fr_trace(includeCollectives: bool | None = None, includeStackTraces: bool | None "
    "= None, onlyActive: bool | None = None, backend: str = 'gloo') -> bytes\n"
)
EMPTY = {
    "version": "2.10",
    "comm_lib_version": "2.29.2",
    "pg_config": {},
    "pg_status": {},
    "nccl_comm_state": {},
}


def entry(seq: int, op: str, retired: bool, created: int) -> dict:
    """One entry as torch 2.15 writes it (keys of the real wheel's dump)."""
    return {
        "collective_seq_id": seq,
        "input_dtypes": ["BFloat16"],
        "input_sizes": [[4096, 1024]],
        "is_p2p": False,
        "op_id": seq,
        "output_dtypes": ["BFloat16"],
        "output_sizes": [[4096, 1024]],
        "p2p_seq_id": 0,
        "pg_id": 0,
        "process_group": ["0", "default_pg"],
        "profiling_name": f"nccl:{op}",
        "record_id": seq - 1,
        "retired": retired,
        "state": "scheduled" if not retired else "completed",
        "thread_id": "140662400465792",
        "thread_name": "python",
        "time_created_ns": created,
        "time_discovered_completed_ns": 0,
        "time_discovered_started_ns": 0,
        "timeout_ms": 600000,
        "duration_ms": 3.5 if retired else None,
    }


NCCL2_RING = {
    **EMPTY,
    "entries": [
        entry(41, "all_reduce", True, 1_796_000_000_000_000_000),
        entry(42, "all_reduce", True, 1_796_000_001_000_000_000),
        entry(43, "reduce_scatter_tensor_coalesced", False, 1_796_000_002_000_000_000),
    ],
}


class Torch215:
    """torch._C._distributed_c10d as torch 2.15 has it: one ring per backend, "gloo" by
    default, any other name an empty ring; the dumps count who asked for which ring."""

    def __init__(self, rings: dict[str, dict]) -> None:
        self.rings = rings
        self.asked: list[str] = []

        def dump_json(includeCollectives=None, onlyActive=None, backend="gloo"):
            self.asked.append(backend)
            return json.dumps(self.rings.get(backend, EMPTY)).encode()

        def dump_pickle(
            includeCollectives=None, includeStackTraces=None, onlyActive=None, backend="gloo"
        ):
            self.asked.append(backend)
            return pickle.dumps(self.rings.get(backend, EMPTY))

        dump_json.__doc__ = SIGNATURE_JSON
        dump_pickle.__doc__ = SIGNATURE_PICKLE
        self.module = types.SimpleNamespace(
            _dump_fr_trace_json=dump_json,
            _dump_fr_trace=dump_pickle,
            _dump_nccl_trace_json=lambda **kw: json.dumps(EMPTY).encode(),
        )


@pytest.fixture
def torch215(monkeypatch):
    """A job whose default group uses "nccl" (ProcessGroupNCCL2 in 2.15) on CUDA."""
    fake = Torch215({"nccl2": NCCL2_RING})
    world = types.SimpleNamespace(pg_backend_config={object(): "cuda:nccl"})
    monkeypatch.setitem(sys.modules, "torch._C._distributed_c10d", fake.module)
    monkeypatch.setitem(
        sys.modules, "torch.distributed", types.SimpleNamespace(is_initialized=lambda: True)
    )
    monkeypatch.setitem(
        sys.modules, "torch.distributed.distributed_c10d", types.SimpleNamespace(_world=world)
    )
    return fake


def test_the_rings_of_the_jobs_backends_are_read(torch215):
    assert flight.rings() == ("gloo", "nccl", "nccl2", "nccl-legacy")


def test_entries_only_in_the_nccl2_ring_are_found_and_the_ring_named(torch215):
    part = flight.Flight(1.0, started=0.0, clock=lambda: 1000.0)
    summary = part.summary({}, None)
    assert set(torch215.asked) == {"gloo", "nccl", "nccl2", "nccl-legacy"}
    group = summary["default_pg"]
    assert group["ring"] == "nccl2" and group["pending"] == 1
    assert group["last"]["seq"] == 43 and group["last"]["op"] == "reduce_scatter_tensor_coalesced"
    # what the agent writes, the reader reads, ring included
    written = state(0, None, None)
    written["flight_recorder"] = json.loads(json.dumps(summary))
    parsed = parse_state(written, 0)
    assert parsed is not None
    (read,) = parsed.flight
    assert (read.group, read.seq, read.ring, read.pending) == ("default_pg", 43, "nccl2", 1)


def test_the_old_single_ring_read_stays_as_it_was(monkeypatch):
    """torch 2.13's dump has no backend keyword: it is called once, as before."""
    asked = []

    def dump_json(includeCollectives=None, onlyActive=None):
        asked.append("one")
        return json.dumps({**EMPTY, "entries": NCCL2_RING["entries"]}).encode()

    dump_json.__doc__ = (
        "_dump_fr_trace_json(includeCollectives: Optional[bool] = None, onlyActive: "
        "Optional[bool] = None) -> bytes\n"
    )
    monkeypatch.setitem(
        sys.modules,
        "torch._C._distributed_c10d",
        types.SimpleNamespace(_dump_fr_trace_json=dump_json),
    )
    monkeypatch.setitem(
        sys.modules, "torch.distributed", types.SimpleNamespace(is_initialized=lambda: True)
    )
    assert flight._dumper() is dump_json
    summary = flight.Flight(1.0, started=0.0, clock=lambda: 1000.0).summary({}, None)
    assert asked == ["one"] and "ring" not in summary["default_pg"]


def test_the_timing_rows_read_every_ring_oldest_first(torch215):
    gloo = {**EMPTY, "entries": [entry(7, "broadcast", True, 1_796_000_001_500_000_000)]}
    gloo["entries"][0]["profiling_name"] = "gloo:broadcast"
    gloo["entries"][0]["process_group"] = ["1", "1"]
    torch215.rings["gloo"] = gloo
    read = timing_flight._dumper()
    rows = timing_flight.rows_of(read())
    assert [(row[0], row[1], row[2]) for row in rows] == [
        ("default_pg", 41, "all_reduce"),
        ("default_pg", 42, "all_reduce"),
        ("1", 7, "broadcast"),
        ("default_pg", 43, "reduce_scatter_tensor_coalesced"),
    ]


def test_a_requested_dump_writes_the_ring_that_holds_the_most(torch215, tmp_path):
    dumps = flight.FlightDumps(str(tmp_path), 3)
    (tmp_path / flight.REQUEST_FILE).write_text("1\n")
    assert dumps.check()
    written = pickle.loads((tmp_path / "rank_3").read_bytes())
    assert [e["collective_seq_id"] for e in written["entries"]] == [41, 42, 43]
