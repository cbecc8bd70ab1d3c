"""Whatever a file holds, the NCCL log reader ends, in bounded memory, without an exception.

Property-based (hypothesis): random bytes, binary, real logs cut anywhere, lines of any
length, and text in several encodings at once, fed in chunks of any size. Then the same on
real files through `parse_file` and the whole comparison, a file far larger than a chunk
with one enormous line included.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mldebug.nccl import compare, logfacts, logparse, ranklog
from mldebug.nccl.logparse import LogParser, parse_file
from mldebug.nccl.scan import scan_paths

DATA = Path(__file__).parent / "data"
GOLDEN = [
    (DATA / "nccl" / "init_refused" / "job.out").read_bytes(),
    (DATA / "nccl" / "watchdog_2.4" / "ranks" / "2" / "stderr.log").read_bytes(),
    (DATA / "gpu" / "nccl_timeout" / "stderr.rank0.txt").read_bytes(),
    (DATA / "gpu" / "nccl_ok" / "nccl.vm.501.log").read_bytes(),
]
LINES = [line + b"\n" for blob in GOLDEN for line in blob.split(b"\n") if line]


def read(data: bytes, chunk: int):
    parser = LogParser("fuzz", rank=None)
    for start in range(0, len(data), chunk):
        parser.feed(data[start : start + chunk])
    procs = parser.close()
    logs = ranklog.ranks_of(procs)
    findings = compare.compare(logs)
    for log in logs:
        ranklog.summary_lines(log)
    return procs, findings


def bounded(procs) -> bool:
    return len(procs) <= logparse.MAX_PROCS + 1 and all(
        len(p.warns) <= logfacts.MAX_WARN_GROUPS + 1
        and len(p.errors) <= logfacts.MAX_ERRORS
        and len(p.timeouts) <= logfacts.MAX_TIMEOUTS
        and len(p.comms) <= logfacts.MAX_COMMS
        for p in procs
    )


chunks = st.integers(min_value=1, max_value=5000)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=20000), chunk=chunks)
def test_random_bytes(data, chunk):
    procs, _ = read(data, chunk)
    assert bounded(procs)


@settings(max_examples=150, deadline=None)
@given(
    pieces=st.lists(
        st.one_of(
            st.sampled_from(LINES),
            st.binary(max_size=200),
            st.sampled_from([b"\x1b[31m", b"\r", b"\x00", b"\xff\xfe", b"\n\n", b"["]),
        ),
        max_size=80,
    ),
    chunk=chunks,
)
def test_real_lines_mixed_with_garbage_and_control_bytes(pieces, chunk):
    procs, findings = read(b"".join(pieces), chunk)
    assert bounded(procs)
    for finding in findings:
        assert all(isinstance(rank, int) for rank in finding.ranks)


@settings(max_examples=60, deadline=None)
@given(which=st.integers(0, len(GOLDEN) - 1), cut=st.floats(0, 1), chunk=chunks)
def test_a_real_log_cut_anywhere(which, cut, chunk):
    data = GOLDEN[which]
    procs, _ = read(data[: int(len(data) * cut)], chunk)
    assert bounded(procs)


@settings(max_examples=60, deadline=None)
@given(
    text=st.text(max_size=300),
    encoding=st.sampled_from(["utf-8", "utf-16", "latin-1", "cp1252", "shift_jis", "gb18030"]),
    line=st.sampled_from(LINES),
    chunk=chunks,
)
def test_mixed_encodings(text, encoding, line, chunk):
    encoded = text.encode(encoding, errors="replace")
    procs, _ = read(line + encoded + b"\n" + line.replace(b"\n", b"\r\n") + encoded, chunk)
    assert bounded(procs)


@settings(max_examples=30, deadline=None)
@given(length=st.integers(0, 3 * logparse.MAX_LINE), fill=st.binary(min_size=1, max_size=3))
def test_long_lines_around_the_limit(length, fill):
    keyword = b"h:1:1 [0] NCCL WARN x " + (fill * length)[:length] + b"\n"
    procs, _ = read(keyword + LINES[0], 4096)
    assert bounded(procs)


def test_many_processes_in_one_file_share_one_bucket_past_the_cap():
    lines = b"".join(
        f"h:{pid}:{pid} [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n".encode()
        for pid in range(logparse.MAX_PROCS + 500)
    )
    procs, _ = read(lines, 1 << 20)
    assert len(procs) == logparse.MAX_PROCS + 1


def test_a_large_file_with_an_enormous_line_and_binary_is_read_to_its_end(tmp_path):
    path = tmp_path / "big.log"
    with open(path, "wb") as out:
        out.write(GOLDEN[0])
        out.write(b"h:9:9 [0] NCCL WARN " + b"\xff" * (20 << 20) + b"\n")  # 20 MB, no newline
        out.write(bytes(range(256)) * 4096)
        out.write(b"\nh:9:9 [0] NCCL INFO NCCL version 2.19.3+cuda12.3\n")
    log = parse_file(str(path))
    assert log.error is None and log.cut_lines >= 1
    assert log.bytes_read == path.stat().st_size
    assert any(p.pid == 9 and p.nccl_version == "2.19.3" for p in log.procs)


def test_the_directory_walk_skips_fifos_and_symlinks(tmp_path):
    import os

    (tmp_path / "real.log").write_bytes(GOLDEN[0])
    os.mkfifo(tmp_path / "fifo.log")  # a read would block forever
    (tmp_path / "link.log").symlink_to("/etc/passwd")
    result = scan_paths([str(tmp_path), str(tmp_path / "link.log")])
    assert [Path(log.path).name for log in result.logs] == ["real.log"]
    assert any("symbolic link" in p for p in result.problems)
