"""Write the Flight Recorder dumps of this folder: assembled from the documented format
(the keys of torch's FlightRecorder.hpp / TraceUtils.h at dump formats 2.4, 2.7 and 2.10),
not recorded: torch 2.13 on this machine writes only format 2.10. Pickled with protocol 2,
as torch does; the JSON forms as `_dump_fr_trace_json` writes them (ints as strings in
pg_status, no frames). Hosts, paths and sizes are our own.

    python tests/data/flight/versions/make.py
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

HERE = Path(__file__).parent
TRAIN = "/home/me/proj/train.py"


def entry(seq, op, pg=("0", "default_pg"), pg_id=0, sizes=((4,),), state="completed", **extra):
    raw = {
        "record_id": seq - 1,
        "pg_id": pg_id,
        "process_group": pg,
        "collective_seq_id": seq,
        "p2p_seq_id": 0,
        "op_id": seq,
        "profiling_name": op,
        "time_created_ns": 1_764_590_000_000_000_000 + seq * 1_000_000,
        "input_sizes": [list(s) for s in sizes],
        "input_dtypes": ["Float"] * len(sizes),
        "output_sizes": [list(s) for s in sizes],
        "output_dtypes": ["Float"] * len(sizes),
        "state": state,
        "time_discovered_started_ns": None,
        "time_discovered_completed_ns": None,
        "retired": state == "completed",
        "timeout_ms": 600000,
        "is_p2p": False,
        "frames": [{"name": "step", "filename": TRAIN, "line": 40 + seq}],
    }
    raw.update(extra)
    return raw


def dump(version, entries, pg_config, pg_status, **top):
    return {
        "version": version,
        "pg_config": pg_config,
        "pg_status": pg_status,
        "entries": entries,
        **top,
    }


def world(ranks):
    return {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(ranks))}}


def write(folder: str, name: str, data: dict, as_json: bool = False) -> None:
    out = HERE / folder
    out.mkdir(exist_ok=True)
    if as_json:
        data = dict(
            data, entries=[{k: v for k, v in e.items() if k != "frames"} for e in data["entries"]]
        )
        data["pg_status"] = {
            g: {k: str(v) for k, v in s.items()} for g, s in data["pg_status"].items()
        }
        (out / name).write_text(json.dumps(data))
    else:
        (out / name).write_bytes(pickle.dumps(data, protocol=2))


def v2_4() -> None:
    """Format 2.4 (torch 2.5): NCCL, old prefix nccl_trace_rank_, nccl_comm_state, duration_ms;
    rank 1 never enqueued all_reduce #3 that rank 0 waits in."""
    for rank, last in ((0, 3), (1, 2)):
        entries = [
            entry(s, "nccl:all_reduce", duration_ms=1.5, state="started" if s == 3 else "completed")
            for s in range(1, last + 1)
        ]
        status = {
            "0": {
                "last_enqueued_collective": last,
                "last_started_collective": last,
                "last_completed_collective": 2,
            }
        }
        data = dump("2.4", entries, world((0, 1)), status, nccl_comm_state={})
        write("v2.4", f"nccl_trace_rank_{rank}", data)
        write("v2.4", f"nccl_trace_rank_{rank}.json", data, as_json=True)


def v2_7() -> None:
    """Format 2.7: `nccl_version` (later `comm_lib_version`), host names in the file names,
    subgroups [0, 2] and [1, 3]: rank 2 never joined all_gather #2 of group 1."""
    config = world(range(4))
    config["1"] = {"name": "1", "desc": "dp_even", "ranks": "[0, 2]"}
    config["2"] = {"name": "2", "desc": "dp_odd", "ranks": "[1, 3]"}
    for rank in range(4):
        even = rank % 2 == 0
        group = ("1", "dp_even") if even else ("2", "dp_odd")
        entries = [entry(1, "nccl:all_reduce")]
        count = 1 if rank == 2 else 2
        entries += [
            entry(
                s,
                "nccl:all_gather",
                pg=group,
                pg_id=1 if even else 2,
                state="started" if (rank == 0 and s == 2) else "completed",
            )
            for s in range(1, count + 1)
        ]
        status = {
            "0": {
                "last_enqueued_collective": 1,
                "last_started_collective": 1,
                "last_completed_collective": 1,
            },
            str(1 if even else 2): {
                "last_enqueued_collective": count,
                "last_started_collective": count,
                "last_completed_collective": 1 if rank == 0 else count,
            },
        }
        data = dump("2.7", entries, config, status, nccl_version="2.21.5", nccl_comm_state={})
        write("v2.7", f"fr_node-a{7 + rank // 2:02d}_rank_{rank}.pickle", data)


def unknown_ops() -> None:
    """Format 2.10 with op names no torch has written (a newer torch, a vendor backend), a
    name without a backend, an int and None: read, compared; rank 2's #3 differs."""
    names = ["xccl:fancy_new_collective", "all_reduce_coalesced_v9", "xccl:fancy_new_collective"]
    for rank in range(3):
        entries = [entry(s + 1, n) for s, n in enumerate(names)]
        entries[2]["profiling_name"] = "xccl:other_new_op" if rank == 2 else names[2]
        entries.append(entry(4, 123))
        entries.append(entry(5, None))
        status = {
            "0": {
                "last_enqueued_collective": 5,
                "last_started_collective": 5,
                "last_completed_collective": 5,
            }
        }
        data = dump("2.10", entries, world(range(3)), status, comm_lib_version="")
        write("unknown_ops", f"comm_lib_trace_rank_{rank}", data)


if __name__ == "__main__":
    v2_4()
    v2_7()
    unknown_ops()
