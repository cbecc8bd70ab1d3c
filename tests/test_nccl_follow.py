"""The live view's reader of a run's NCCL logs and stderr: it follows the files as they
grow, reading each byte once, and its findings change with what is written.

The lines are NCCL 2.18's documented `comm ... - Init START/COMPLETE` (see
tests/data/nccl/README.md) and the torch 2.4 watchdog stderr of tests/data/nccl/watchdog_2.4.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from mldebug.model import KIND_NCCL_INIT, KIND_OUTLIER
from mldebug.nccl.follow import RunFollower

DATA = Path(__file__).parent / "data" / "nccl"


def init_line(rank: int, state: str) -> str:
    pid = 500 + rank
    return (
        f"h{rank}:{pid}:{pid} [0] NCCL INFO comm 0x5500 rank {rank} nranks 2 cudaDev 0 "
        f"nvmlDev 0 busId 1000 commId 0xabcdef - Init {state}\n"
    )


def test_findings_follow_the_logs_as_they_grow_and_each_byte_is_read_once(tmp_path):
    (tmp_path / "nccl").mkdir()
    logs = [tmp_path / "nccl" / f"h{rank}.{500 + rank}.log" for rank in (0, 1)]
    logs[0].write_text(init_line(0, "START") + init_line(0, "COMPLETE"))
    logs[1].write_text(init_line(1, "START"))
    follower = RunFollower(tmp_path)

    first = follower.update()
    assert [(f.kind, f.ranks) for f in first.findings] == [(KIND_NCCL_INIT, (1,))]

    with open(logs[1], "a") as out:
        out.write(init_line(1, "COMPLETE"))
    second = follower.update()
    assert second.findings == []
    # Each file was read to its end, its older bytes once.
    assert [log.bytes_read for log in sorted(second.logs, key=lambda log: log.path)] == [
        log.stat().st_size for log in logs
    ]

    logs[1].write_text(init_line(1, "START"))  # replaced by a shorter file: read anew
    third = follower.update()
    assert [(f.kind, f.ranks) for f in third.findings] == [(KIND_NCCL_INIT, (1,))]


def test_a_ranks_stderr_is_read_from_its_tail_first(tmp_path):
    shutil.copytree(DATA / "watchdog_2.4" / "ranks", tmp_path / "ranks")
    noise = "".join(f"[rank2]: step {i} loss 1.0\n" for i in range(20000)).encode()
    stderr = tmp_path / "ranks" / "2" / "stderr.log"
    stderr.write_bytes(noise + stderr.read_bytes())
    scan = RunFollower(tmp_path, stderr_tail=4096).update()
    (finding,) = scan.findings
    assert (finding.kind, finding.ranks) == (KIND_OUTLIER, (2,))
    log = next(log for log in scan.logs if log.path == str(stderr))
    assert log.bytes_read == stderr.stat().st_size  # followed to its end...
    assert log.lines < 200  # ...having read its last 4 KB only, not 20,000 lines of noise


def test_nccl_lines_in_a_ranks_stdout_are_read_from_its_head(tmp_path):
    # NCCL_DEBUG=INFO without NCCL_DEBUG_FILE: NCCL writes to the rank's stdout.
    from mldebug.nccl.scan import scan_run

    for rank, log in enumerate(sorted((DATA / "transport").iterdir())):
        folder = tmp_path / "ranks" / str(rank)
        folder.mkdir(parents=True)
        training = "".join(f"step {i} loss 1.0\n" for i in range(100_000)).encode()
        (folder / "stdout.log").write_bytes(log.read_bytes() + training)
    for scan in (RunFollower(tmp_path).update(), scan_run(tmp_path)):
        assert [(f.kind, f.ranks) for f in scan.findings] == [("nccl_network", (3,))]
