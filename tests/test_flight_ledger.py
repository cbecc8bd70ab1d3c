"""The Flight Recorder comparison through the collective ledger: what torch's analyser
(torchfrtrace) finds, and what it misses.

Recorded (torch 2.13 gloo on CPU, tests/data/flight/record.py): rank 0 as the culprit,
coalesced all-reduces, all_to_all with uneven totals. Assembled from torch's documented dump format
(NCCL names both ends of a p2p op in its profiling name, `nccl:send 0->1`; NCCL entries move
scheduled -> started -> completed): p2p pairs, state mismatches, many mismatches in a group.
"""

from __future__ import annotations

import pickle
from pathlib import Path

from mldebug.flight import compare_flight_dumps, read_flight_dump
from mldebug.model import KIND_MISMATCH, KIND_OUTLIER

FLIGHT = Path(__file__).resolve().parent / "data" / "flight"


def recorded(name: str) -> list:
    return [read_flight_dump(str(p)) for p in sorted((FLIGHT / name).glob("comm_lib_trace_*"))]


def test_rank_0_as_the_culprit_is_named_by_majority_and_the_innocent_are_not_blamed():
    (finding,) = compare_flight_dumps(recorded("rank0"))
    assert finding.kind == KIND_MISMATCH and finding.ranks == (0,)
    assert finding.summary.startswith(
        "ranks make different tensors as call #4, which never match: ranks 1-2 call "
        "all_reduce of float32[4]"
    )
    assert finding.summary.endswith("rank 0 is the odd one out")


def test_a_coalesced_all_reduce_against_a_plain_one_is_a_size_mismatch():
    (finding,) = compare_flight_dumps(recorded("coalesced"))
    assert finding.ranks == (2,)
    assert "ranks 0-1 call all_reduce of float32[4], float32[2]" in finding.summary
    assert "rank 2 calls all_reduce of float32[4]" in finding.summary


def test_all_to_all_whose_totals_differ_names_the_uneven_rank():
    (finding,) = compare_flight_dumps(recorded("alltoall"))
    assert finding.ranks == (2,)
    assert finding.summary.startswith(
        "ranks make all_to_all calls whose totals differ as call #3, which never match: "
        "ranks 0-1 call all_to_all sending 3 and receiving 3 elements"
    )
    assert "rank 2 calls all_to_all sending 6 and receiving 3 elements" in finding.summary


def _entry(seq: int, name: str, sizes, state="scheduled", p2p_seq=0, p2p=False) -> dict:
    return {
        "record_id": seq + p2p_seq,
        "pg_id": 0,
        "process_group": ("0", "default_pg"),
        "collective_seq_id": seq,
        "p2p_seq_id": p2p_seq,
        "op_id": seq,
        "profiling_name": name,
        "time_created_ns": 1_700_000_000_000_000_000 + seq,
        "input_sizes": sizes,
        "input_dtypes": ["Float"] * len(sizes),
        "output_sizes": sizes,
        "output_dtypes": ["Float"] * len(sizes),
        "state": state,
        "retired": False,
        "timeout_ms": 600000,
        "is_p2p": p2p,
    }


def _dumps(tmp_path: Path, entries: dict[int, list[dict]], world: int = 2) -> list:
    paths = []
    for rank, mine in entries.items():
        dump = {
            "version": "2.10",
            "comm_lib_version": "2.28.9",
            "pg_config": {
                "0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(world)))}
            },
            "pg_status": {},
            "entries": mine,
        }
        path = tmp_path / f"nccl_trace_rank_{rank}"
        path.write_bytes(pickle.dumps(dump, protocol=2))
        paths.append(path)
    return [read_flight_dump(str(p)) for p in paths]


def test_a_send_nobody_receives_names_the_receiver(tmp_path):
    sends = [_entry(0, "nccl:send 0->1", [[4]], p2p_seq=k, p2p=True) for k in (1, 2)]
    recvs = [_entry(0, "nccl:recv 1<-0", [[4]], "completed", p2p_seq=1, p2p=True)]
    sends[0]["state"] = "completed"
    found = compare_flight_dumps(_dumps(tmp_path, {0: sends, 1: recvs}))
    (finding,) = [f for f in found if f.kind == KIND_MISMATCH]
    assert finding.ranks == (1,)
    assert finding.summary == "rank 1 never received send #2 of rank 0, which waits for it"


def test_a_receive_of_another_size_is_named_with_both_sizes(tmp_path):
    send = _entry(0, "nccl:send 0->1", [[4]], p2p_seq=1, p2p=True)
    recv = _entry(0, "nccl:recv 1<-0", [[8]], p2p_seq=1, p2p=True)
    (finding,) = compare_flight_dumps(_dumps(tmp_path, {0: [send], 1: [recv]}))
    assert finding.summary == ("send #1 of rank 0 sends float32[4] but rank 1 receives float32[8]")


def test_a_collective_started_on_some_ranks_only_names_the_rank_that_never_started_it(
    tmp_path,
):
    entries = {
        r: [_entry(1, "nccl:all_reduce", [[4]], "started" if r != 2 else "scheduled")]
        for r in range(3)
    }
    (finding,) = compare_flight_dumps(_dumps(tmp_path, entries, world=3))
    assert finding.ranks == (2,)
    assert finding.summary.startswith(
        "ranks make one collective that only some started as call #1, which never match: "
        "ranks 0-1 call all_reduce (started); rank 2 calls all_reduce (scheduled)"
    )


def test_every_mismatch_of_a_group_is_reported_not_only_the_first(tmp_path):
    # rank 1 passes other sizes at #2 and #4: two mismatches, each said (torchfrtrace stops
    # at the first)
    def calls(rank):
        return [
            _entry(s, "nccl:all_reduce", [[8]] if rank == 1 and s in (2, 4) else [[4]], "completed")
            for s in range(1, 6)
        ]

    found = compare_flight_dumps(_dumps(tmp_path, {r: calls(r) for r in range(3)}, world=3))
    mismatches = [f for f in found if f.kind == KIND_MISMATCH]
    assert [f.summary.split(",")[0] for f in mismatches] == [
        "ranks make different tensors as call #2",
        "ranks make different tensors as call #4",
    ]
    assert all(f.ranks == (1,) for f in mismatches)


def test_a_subgroup_member_whose_dump_has_the_group_but_no_call_on_it_is_behind(tmp_path):
    # NCCL lists each group a rank belongs to in its pg_config, called on or not
    def dump(rank: int, entries: list[dict]) -> Path:
        raw = {
            "version": "2.10",
            "comm_lib_version": "2.28.9",
            "pg_config": {
                "0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2]"},
                "1": {"name": "1", "desc": "undefined", "ranks": "[0, 1]"},
            }
            if rank < 2
            else {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2]"}},
            "pg_status": {},
            "entries": entries,
        }
        path = tmp_path / f"nccl_trace_rank_{rank}"
        path.write_bytes(pickle.dumps(raw, protocol=2))
        return path

    world = [_entry(1, "nccl:all_reduce", [[4]], "completed") for _ in range(3)]
    pair = dict(_entry(1, "nccl:all_reduce", [[4]], "started"), process_group=("1", "undefined"))
    pair["pg_id"] = 1
    paths = [dump(0, [world[0], pair]), dump(1, [world[1]]), dump(2, [world[2]])]
    (finding,) = compare_flight_dumps([read_flight_dump(str(p)) for p in paths])
    assert finding.kind == KIND_OUTLIER and finding.ranks == (1,)
    assert finding.summary == (
        "rank 1 never called all_reduce #1 on group 1: it has made no call on it yet; "
        "rank 0 waits in it"
    )
