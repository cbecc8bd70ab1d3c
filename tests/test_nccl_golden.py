"""What `mldebug nccl` reads in NCCL logs and torch.distributed error text of several eras.

The inputs are tests/data/nccl (logs assembled from NCCL's and torch's documented formats,
and stderr recorded from real gloo jobs; its README says which is which) and tests/data/gpu
(real NCCL INFO logs and watchdog output recorded on an H200). The parser and the
comparison are the real ones.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mldebug.model import (
    KIND_CONNECTION,
    KIND_DIST_ERROR,
    KIND_NCCL_INIT,
    KIND_NCCL_NETWORK,
    KIND_NCCL_TIMEOUT,
    KIND_NCCL_VERSION,
    KIND_NCCL_WARNING,
    KIND_OUTLIER,
    SEVERITY_ERROR,
    SEVERITY_WARNING,
)
from mldebug.nccl.logparse import CHUNK, LogParser, parse_bytes
from mldebug.nccl.scan import scan_paths

DATA = Path(__file__).parent / "data"
NCCL = DATA / "nccl"
GPU = DATA / "gpu"


def scan(*names: str):
    return scan_paths([str(NCCL / n) if not n.startswith("/") else n for n in names])


def by_rank(result):
    return {log.rank: log for log in result.ranks if log.rank is not None}


def kinds(result) -> list[tuple[str, tuple[int, ...]]]:
    return [(f.kind, f.ranks) for f in result.findings]


# ---- real recordings from an H200 (NCCL 2.28.9, torch 2.11) ------------------------------


def test_the_recorded_h200_info_log_gives_version_driver_transport_and_init():
    result = scan_paths([str(GPU / "nccl_ok" / "nccl.vm.501.log")])
    (log,) = result.ranks
    assert log.rank == 0  # from "comm 0x28590bd0 rank 0 nranks 1 ... - Init START"
    assert (log.hosts, log.pids) == (["vm"], [501])
    assert log.first("nccl_version") == "2.28.9"
    assert log.first("cuda_runtime") == "13.0"
    assert log.first("cuda_driver") == "13.0"  # cudaDriverVersion 13000
    assert (log.network, log.interface) == ("Socket", "eth0")
    assert log.first("ib_devices") is None  # "NET/IB : Using [RO]; OOB eth0": no device
    (comm,) = log.comms
    assert (comm.rank, comm.nranks, comm.completed, comm.aborted) == (0, 1, True, True)
    assert comm.comm_id == "0x23c61a47a42ccd90"
    assert result.findings == []


def test_the_recorded_watchdog_timeout_gives_seqnum_op_sizes_and_last_enqueued():
    result = scan_paths([str(GPU / "nccl_timeout" / "stderr.rank0.txt")])
    (log,) = result.ranks
    assert log.rank == 0
    (fact,) = log.timeouts  # torch says it three times: one timeout
    assert (fact.pg, fact.seq, fact.op) == ("0", 2, "ALLREDUCE")
    assert (fact.numel_in, fact.numel_out, fact.timeout_ms, fact.ran_ms) == (
        1048576,
        1048576,
        15000,
        15080,
    )
    assert (log.last_enqueued("0"), log.last_completed("0")) == (2, 1)
    (finding,) = result.findings
    assert finding.kind == KIND_NCCL_TIMEOUT and finding.ranks == (0,)
    assert finding.recipe == "nccl-watchdog-timeout"
    assert "ALLREDUCE SeqNum 2" in finding.summary


def test_the_recorded_duplicate_gpu_refusal_is_one_error_and_one_warn_group_for_both_ranks():
    result = scan_paths([str(GPU / "nccl_duplicate_gpu")])
    assert set(by_rank(result)) == {0, 1}
    # The bare "NCCL version 2.28.9+cuda13.0" line goes to the process that wrote the WARN.
    assert by_rank(result)[0].first("nccl_version") == "2.28.9"
    errors = [f for f in result.findings if f.kind == KIND_DIST_ERROR]
    assert [f.ranks for f in errors] == [(0, 1)]
    assert "invalid usage" in errors[0].summary
    assert "Duplicate GPU detected" in errors[0].detail  # NCCL's "Last error:" line
    (warn,) = [f for f in result.findings if f.kind == KIND_NCCL_WARNING]
    # "rank 0 and rank 1" and "rank 1 and rank 0": one message, numbers aside.
    assert warn.ranks == (0, 1) and warn.location == "init.cc:904"
    assert warn.severity == SEVERITY_WARNING


# ---- assembled from documented formats ---------------------------------------------------


def test_the_rank_on_sockets_while_the_others_use_infiniband_is_named():
    result = scan("transport")
    ranks = by_rank(result)
    assert sorted(ranks) == [0, 1, 2, 3]
    assert [ranks[r].network for r in range(4)] == ["IB", "IB", "IB", "Socket"]
    assert ranks[0].interface == "ib0" and ranks[3].interface == "eth0"
    assert ranks[3].first("ib_devices") == ("mlx5_0", "mlx5_1")
    assert all(r.first("nccl_version") == "2.18.3" for r in ranks.values())  # bare line
    (finding,) = result.findings
    assert (finding.kind, finding.ranks, finding.recipe) == (
        KIND_NCCL_NETWORK,
        (3,),
        "nccl-sockets-instead-of-ib",
    )
    assert "found InfiniBand devices" in finding.summary
    assert {p.label: p.ranks for p in finding.parts} == {"IB": (0, 1, 2), "Socket": (3,)}


def test_mixed_nccl_cuda_and_driver_versions_are_named():
    result = scan("versions")
    assert [(f.kind, f.ranks, f.severity) for f in result.findings] == [
        # Two ranks, two versions: neither is the odd one, both are named.
        (KIND_NCCL_VERSION, (0, 1), SEVERITY_ERROR),
        (KIND_NCCL_VERSION, (0, 1), SEVERITY_WARNING),
        (KIND_NCCL_VERSION, (0, 1), SEVERITY_WARNING),
    ]
    assert "2.18.1 on rank 1; 2.19.3 on rank 0" in result.findings[0].summary
    assert all(f.recipe == "nccl-version-mismatch" for f in result.findings)


def test_interleaved_mpirun_output_is_told_apart_by_pid_and_the_missing_init_is_named():
    result = scan("init_refused")
    ranks = by_rank(result)
    assert sorted(ranks) == [0, 1, 2, 3]
    assert [ranks[r].pids for r in range(4)] == [[5300], [5301], [5302], [5303]]
    assert [ranks[r].first("nccl_version") for r in range(4)] == ["2.21.5"] * 4
    assert [f.kind for f in result.findings][:3] == [
        KIND_NCCL_INIT,
        KIND_CONNECTION,
        KIND_DIST_ERROR,
    ]
    init = result.findings[0]
    assert init.ranks == (2,) and init.recipe == "nccl-init-failure"
    assert "which ranks 0-1,3 reached" in init.summary
    refused = result.findings[1]
    assert refused.ranks == (2,) and "10.2.0.9:41525" in refused.summary
    assert refused.recipe == "connection-refused"
    warn = next(f for f in result.findings if f.kind == KIND_NCCL_WARNING)
    assert warn.location == "misc/socket.cc:484"
    assert warn.summary.endswith("-> ncclRemoteError")  # the unwinding's last "-> 6"
    assert warn.detail.startswith("init.cc:1384 -> 6 <- bootstrap.cc:274 -> 6")


def test_watchdog_timeouts_compared_by_seqnum_name_the_rank_that_never_enqueued_the_work():
    result = scan("watchdog_2.4")
    (finding,) = result.findings
    # A rank behind, as the ledger words and classes it whichever source saw it.
    assert (finding.kind, finding.ranks, finding.recipe) == (
        KIND_OUTLIER,
        (2,),
        "rank-outside-collective",
    )
    assert finding.waiting == (0, 1, 3) and finding.sources == ("watchdog",)
    assert finding.collective is not None and finding.collective.seq == 57
    assert finding.summary.startswith(
        "rank 2 never called all_reduce #57; ranks 0-1,3 timed out in it (ALLREDUCE SeqNum 57 "
        "of PG 0"
    )
    assert "last enqueued: 56" in finding.summary
    assert [p.ranks for p in finding.parts] == [(0, 1, 3), (2,)]


def test_old_watchdog_lines_without_seqnum_behind_srun_labels_and_colours():
    result = scan("watchdog_1.10")
    ranks = by_rank(result)
    assert sorted(ranks) == [0, 1, 2]
    assert [(t.seq, t.op, t.timeout_ms) for t in ranks[1].timeouts] == [
        (None, "BROADCAST", 1800000)
    ]
    assert ranks[1].timeouts[0].ran_ms == 1801416
    assert kinds(result) == [(KIND_NCCL_TIMEOUT, (0, 1, 2))]


def test_warn_lines_with_timestamp_and_function_are_grouped_across_their_peers():
    result = scan("mldebug_console")
    ranks = by_rank(result)
    assert [ranks[r].pids for r in (0, 1)] == [[2000], [2001]]  # from [node7:R] and the pid
    assert ranks[1].warn_count == 3
    (warn,) = result.findings
    assert warn.kind == KIND_NCCL_WARNING and warn.ranks == (1,)
    assert "(3x)" in warn.summary and warn.location == "transport/net_ib.cc:1296"


# ---- real gloo recordings (torch 2.13, CPU) ----------------------------------------------


def test_gloo_monitored_barrier_names_the_rank_that_never_arrived():
    result = scan("gloo/barrier")
    barrier = next(f for f in result.findings if f.kind == KIND_DIST_ERROR)
    assert barrier.ranks == (2,) and barrier.recipe == "rank-outside-collective"
    assert "as rank 0 reports" in barrier.summary


def test_gloo_recv_timeout_points_at_the_rank_that_did_not_time_out():
    result = scan("gloo/recv_timeout")
    (finding,) = result.findings
    assert (finding.kind, finding.ranks) == (KIND_DIST_ERROR, (2,))
    assert "ranks 0-1 timed out in a gloo collective" in finding.summary


def test_peer_closed_names_who_lost_the_connection_and_who_said_nothing():
    result = scan("gloo/peer_closed")
    (finding,) = result.findings
    assert (finding.kind, finding.ranks) == (KIND_CONNECTION, (0, 2))
    assert "127.0.0.1" in finding.summary and "rank 1 reported no error" in finding.summary


@pytest.mark.parametrize(
    "folder, text",
    [("gloo/store_clients", "1/3 clients joined"), ("gloo/store_refused", "127.0.0.1:")],
)
def test_store_failures_are_connection_findings(folder, text):
    result = scan(folder)
    (finding,) = result.findings
    assert finding.kind == KIND_CONNECTION and finding.recipe == "connection-refused"
    assert text in finding.summary


def test_gloo_size_mismatch_on_2_13_shows_as_every_rank_timing_out():
    result = scan("gloo/size_mismatch")
    (finding,) = result.findings
    assert (finding.kind, finding.ranks, finding.recipe) == (
        KIND_DIST_ERROR,
        (0, 1, 2),
        "collective-hang",
    )


def test_enforce_fail_of_older_gloo_is_a_size_mismatch():
    # gloo before torch 2.x raised this when the sizes differed (ProcessGroupGloo, pair.cc).
    text = (
        b"[rank1]: RuntimeError: [enforce fail at ../third_party/gloo/gloo/transport/tcp/"
        b"pair.cc:446] op.preamble.length <= op.nbytes. 8 vs 4\n"
    )
    from mldebug.nccl import compare, ranklog

    logs = ranklog.ranks_of(parse_bytes(text))
    (finding,) = compare.compare(logs)
    assert (finding.kind, finding.ranks, finding.recipe) == (
        KIND_DIST_ERROR,
        (1,),
        "mismatched-collectives",
    )


# ---- the reading itself ------------------------------------------------------------------


@pytest.mark.parametrize("size", [1, 7, 100, 4096])
def test_any_chunking_of_a_file_reads_the_same(size):
    data = (NCCL / "init_refused" / "job.out").read_bytes() * 3
    whole = parse_bytes(data)
    parser = LogParser("x")
    for start in range(0, len(data), size):
        parser.feed(data[start : start + size])
    pieces = parser.close()

    def facts(procs):
        return sorted(
            (
                (
                    p.rank,
                    p.pid,
                    p.nccl_version,
                    p.warn_count,
                    len(p.comms),
                    sorted(map(repr, p.errors)),
                )
                for p in procs
            ),
            key=repr,
        )

    assert facts(pieces) == facts(whole)
    assert CHUNK > len(data)  # parse_bytes read it in one piece


def test_a_line_longer_than_the_limit_is_cut_and_what_follows_it_is_read():
    huge = b"x" * (3 * CHUNK) + b" NCCL WARN never seen\n"
    after = b"h:1:1 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n"
    parser = LogParser("x")
    for start in range(0, len(huge + after), 65536):
        parser.feed((huge + after)[start : start + 65536])
    (proc,) = parser.close()
    assert parser.cut_lines == 1 and proc.nccl_version == "2.21.5" and proc.warn_count == 0


# ---- single lines of other eras (shapes from torch's ProcessGroupNCCL.cpp and TCPStore) ----


def read_text(text: str):
    from mldebug.nccl import compare, ranklog

    logs = ranklog.ranks_of(parse_bytes(text.encode()))
    return logs, compare.compare(logs)


def test_the_heartbeat_monitor_of_torch_2_2_is_a_watchdog_finding():
    logs, found = read_text(
        "[rank25]:[E ProcessGroupNCCL.cpp:1316] [PG 0 Rank 25] Heartbeat monitor timed out! "
        "Process will be terminated after dumping debug info. workMetaList_.size()=2\n"
    )
    (finding,) = found
    assert (finding.kind, finding.ranks) == (KIND_NCCL_TIMEOUT, (25,))
    assert "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC" in finding.summary


def test_a_blocking_wait_timeout_is_read_like_the_watchdogs():
    logs, found = read_text(
        "[rank1]:[E1130 10:00:00.1 ProcessGroupNCCL.cpp:900] [PG ID 0 PG GUID 0(default_pg) "
        "Rank 1] Work WorkNCCL(SeqNum=9, OpType=BROADCAST, NumelIn=10, NumelOut=10, "
        "Timeout(ms)=5000) timed out in blocking wait.\n"
    )
    (fact,) = logs[0].timeouts
    assert (fact.seq, fact.op, fact.blocking, fact.timeout_ms) == (9, "BROADCAST", True, 5000)
    assert [(f.kind, f.ranks) for f in found] == [(KIND_NCCL_TIMEOUT, (1,))]


def test_the_tcpstore_client_refused_behind_an_mpich_prefix_names_host_and_port():
    logs, found = read_text(
        "[3] [W socket.cpp:601] [c10d] The client socket has failed to connect to "
        "[node0]:29500 (errno: 111 - Connection refused).\n"
    )
    (finding,) = found
    assert (finding.kind, finding.ranks) == (KIND_CONNECTION, (3,))
    assert "could not connect to node0:29500" in finding.summary


def nccl_lines(rank: int, net: str, iface: str, ib: bool) -> str:
    p = f"n{rank}:{100 + rank}:{100 + rank} [0] NCCL INFO "
    lines = [p + f"NET/IB : Using [0]mlx5_0:1/IB ; OOB {iface}:10.0.0.{rank}<0>"] if ib else []
    lines += [
        p + f"NET/Socket : Using [0]{iface}:10.0.0.{rank}<0>",
        p + f"Using network {net}",
        p + f"comm 0x1 rank {rank} nranks 3 cudaDev 0 busId 1000 - Init COMPLETE",
    ]
    return "\n".join(lines) + "\n"


def test_every_rank_on_sockets_though_ib_devices_exist_is_a_warning():
    _, found = read_text("".join(nccl_lines(r, "Socket", "eth0", ib=True) for r in range(3)))
    (finding,) = found
    assert (finding.kind, finding.ranks, finding.severity) == (
        KIND_NCCL_NETWORK,
        (0, 1, 2),
        SEVERITY_WARNING,
    )
    assert "although NCCL found InfiniBand devices (mlx5_0)" in finding.summary


def test_the_rank_on_another_interface_is_named():
    text = "".join(
        nccl_lines(r, "Socket", "eth1" if r == 2 else "eth0", ib=False) for r in range(3)
    )
    _, found = read_text(text)
    (finding,) = found
    assert (finding.kind, finding.ranks) == (KIND_NCCL_NETWORK, (2,))
    assert "eth0 on ranks 0-1; eth1 on rank 2" in finding.summary


def test_every_rank_timing_out_in_the_same_seqnum_blames_the_collective_not_a_rank():
    line = (
        "[rank{r}]:[E1130 10:00:00.1 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=7, OpType=ALLGATHER, NumelIn=8, "
        "NumelOut=16, Timeout(ms)=60000) ran for 60005 milliseconds before timing out.\n"
    )
    _, found = read_text("".join(line.format(r=r) for r in range(2)))
    (finding,) = found
    assert finding.ranks == (0, 1)
    assert finding.summary.startswith(
        "all 2 ranks made all_gather #7 and none has seen it complete, and none is behind: "
        "the collective itself does not complete (ranks 0-1 timed out in ALLGATHER SeqNum 7"
    )


def test_nccl_lines_behind_torchrun_tee_and_a_collectors_timestamp():
    # torchrun --tee 3 prefixes "[default<local rank>]:"; a log collector (Kubernetes)
    # an RFC 3339 time: neither hides the NCCL line.
    logs, _ = read_text(
        "[default1]:n1:41:41 [1] NCCL INFO NCCL version 2.20.5+cuda12.4\n"
        "2024-05-01T10:00:00.123456789Z n2:52:52 [0] NCCL INFO Using network Socket\n"
    )
    by_pid = {log.label: log for log in logs}
    assert by_pid["n1:41"].first("nccl_version") == "2.20.5"
    assert by_pid["n2:52"].network == "Socket"
