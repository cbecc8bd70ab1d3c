"""`mldebug nccl` of a log bigger than PICK_BYTES: grep (run as a subprocess) hands the parser
only the lines that hold a keyword and the line after each; what the parser makes of them
is what it makes of the whole file read a chunk at a time.

The log is made here: every text of tests/data/nccl and tests/data/explain (NCCL INFO and
WARN lines, torch's watchdog and errors, "Last error:" followed by its error), each after
NCCL INFO chatter with srun's `N: ` prefixes.
"""

from __future__ import annotations

from pathlib import Path

from mldebug.files import picked as picking
from mldebug.nccl import compare, logparse, ranklog
from mldebug.nccl.scan import scan_paths

DATA = Path(__file__).resolve().parent / "data"


def _chatter(lines: int) -> bytes:
    return "".join(
        f"{i % 8}: gpu{i % 8:03d}:{4100 + i % 8}:{4200 + i % 8} [{i % 8}] NCCL INFO Channel "
        f"{i % 32:02d}/0 : {i % 8}[{i % 8}] -> {(i + 1) % 8}[{(i + 1) % 8}] via P2P/IPC/read\n"
        for i in range(lines)
    ).encode()


def _big_log(path: Path) -> None:
    texts = [
        p.read_bytes()
        for folder in ("nccl", "explain")
        for p in sorted((DATA / folder).rglob("*"))
        if p.is_file() and p.suffix in (".log", ".txt", ".out")
    ]
    chatter = _chatter(2_000)
    with open(path, "wb") as out:
        while out.tell() <= logparse.PICK_BYTES + (1 << 20):
            for text in texts:
                out.write(chatter)
                out.write(text if text.endswith(b"\n") else text + b"\n")


def test_a_big_log_read_through_grep_parses_as_the_whole_file(tmp_path, monkeypatch):
    path = tmp_path / "slurm-77.out"
    _big_log(path)
    picked = logparse.parse_file(str(path))
    monkeypatch.setattr(logparse, "PICK_BYTES", 1 << 40)  # the chunked read of every byte
    whole = logparse.parse_file(str(path))
    assert whole.lines == picked.lines == path.read_bytes().count(b"\n")
    assert whole.bytes_read == picked.bytes_read == path.stat().st_size
    assert repr(picked.procs) == repr(whole.procs) and len(whole.procs) > 8
    findings = compare.compare(ranklog.ranks_of(picked.procs))
    assert findings == compare.compare(ranklog.ranks_of(whole.procs)) and findings


def test_a_big_log_read_by_a_grep_a_part_at_once_parses_as_through_one_grep(tmp_path, monkeypatch):
    # GIVEN the big log, read through one grep
    path = tmp_path / "slurm-77.out"
    _big_log(path)
    one = logparse.parse_file(str(path))
    # WHEN it is read by 3 greps at once, each its part of the file
    monkeypatch.setattr(picking, "SPLIT_BYTES", 1 << 20)
    monkeypatch.setattr(picking, "cpus", lambda: 3)
    parts: list[int] = []
    by_greps = picking._by_greps
    monkeypatch.setattr(
        picking, "_by_greps", lambda *args: parts.append(len(args[7])) or by_greps(*args)
    )
    got = logparse.parse_file(str(path))
    # THEN the parser made the same of it
    assert parts == [3]
    assert got.lines == one.lines and got.bytes_read == one.bytes_read
    assert repr(got.procs) == repr(one.procs) and len(got.procs) > 8


def test_the_nccl_command_path_reads_a_big_log_through_grep(tmp_path, monkeypatch):
    path = tmp_path / "slurm-77.out"
    _big_log(path)
    fed: list[int] = []
    feed = logparse.LogParser.feed
    monkeypatch.setattr(
        logparse.LogParser, "feed", lambda self, c: fed.append(len(c)) or feed(self, c)
    )
    (log,) = scan_paths([str(path)]).logs
    assert log.lines == path.read_bytes().count(b"\n")
    assert sum(fed) < path.stat().st_size / 4  # the parser saw the picked lines only
