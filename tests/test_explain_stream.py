"""`mldebug explain` of a log bigger than any of its buffers: read in one streaming pass, an
error anywhere in it (its first lines, its middle, its very end: past the 32 MB and 400,000
lines explain once read) is found as in a small file that holds it, at its own line
numbers, and the command's memory does not grow with the file.

The logs are made here: NCCL INFO chatter with srun's `N: ` prefixes (the lines that make
most of a big SLURM output) around fragments of the explain corpus (tests/data/explain).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mldebug.explain import stream
from mldebug.explain.engine import STREAM_WORDS, WHOLE_BYTES, explain
from mldebug.explain.engine import stream_words as engine_stream_words
from mldebug.explain.text import AROUND
from mldebug.files import picked, wordblocks
from mldebug.nccl import logparse
from mldebug.nccl.scan import scan_paths

CORPUS = Path(__file__).resolve().parent / "data" / "explain"
FRAGMENTS = ("timeout_rank6_absent.log", "elastic_sigsegv.log", "nccl_oom_enqueue.log")
BIG_MB = 48  # over the 32 MB explain read of a file before, and over WHOLE_BYTES


def _chatter(lines: int, start: int = 0) -> bytes:
    return "".join(
        f"{i % 8}: gpu{i % 8:03d}:{4100 + i % 8}:{4200 + i % 8} [{i % 8}] NCCL INFO Channel "
        f"{i % 32:02d}/0 : {i % 8}[{i % 8}] -> {(i + 1) % 8}[{(i + 1) % 8}] via P2P/IPC/read\n"
        for i in range(start, start + lines)
    ).encode()


def _log(path: Path, fragment: bytes, before_mb: float, after_mb: float) -> int:
    """A log of chatter, `fragment` after `before_mb` of it; the fragment's first line number.
    The AROUND lines on each side of it are the same in every log made: a big log's
    streamed read keeps them, a small one is read whole, and both readers see the same."""
    block = _chatter(8_192)
    per_block = block.count(b"\n")
    blocks_before = round(before_mb * (1 << 20) / len(block))
    with open(path, "wb") as out:
        for _ in range(blocks_before):
            out.write(block)
        out.write(_chatter(AROUND))
        out.write(fragment)
        out.write(_chatter(AROUND))
        for _ in range(round(after_mb * (1 << 20) / len(block))):
            out.write(block)
    return blocks_before * per_block + AROUND + 1


def _said(findings) -> list[tuple]:
    return [(f.kind, f.ranks, f.severity, f.recipe) for f in findings]


@pytest.fixture(scope="module")
def small_findings(tmp_path_factory) -> dict[str, list[tuple]]:
    """Each fragment in a small file (chatter around it, read whole)."""
    folder = tmp_path_factory.mktemp("small")
    out = {}
    for index, name in enumerate(FRAGMENTS):
        path = folder / f"slurm-{index}.out"  # a fragment's name may name a rank
        _log(path, (CORPUS / name).read_bytes(), 0, 0)
        out[name] = _said(explain([str(path)]).findings)
        assert out[name], name
    return out


@pytest.mark.parametrize("name", FRAGMENTS)
@pytest.mark.parametrize("where", ["start", "middle", "end"])
def test_an_error_anywhere_in_a_big_log_is_found_as_in_a_small_one(
    tmp_path, small_findings, name, where
):
    # GIVEN a 48 MB log (over 600,000 lines) with the fragment at its start, middle or end
    before = {"start": 0, "middle": BIG_MB / 2, "end": BIG_MB}[where]
    path = tmp_path / "slurm-4242.out"
    first = _log(path, (CORPUS / name).read_bytes(), before, BIG_MB - before)
    assert path.stat().st_size > WHOLE_BYTES and path.stat().st_size > 40 << 20
    # WHEN explained, THEN the findings are the small file's, cited at the big file's lines
    got = explain([str(path)])
    assert _said(got.findings) == small_findings[name]
    fragment_lines = (CORPUS / name).read_bytes().count(b"\n")
    cited = [int(w.rsplit(":", 1)[1]) for f in got.findings for w in f.lines if ":" in w]
    assert cited and all(first <= n < first + fragment_lines for n in cited)
    (source,) = got.sources
    assert source.lines == path.read_bytes().count(b"\n") and not source.truncated
    assert source.bytes_read == path.stat().st_size


def _peak_mb(argv: list[str]) -> tuple[float, str]:
    """The command's peak RSS (the largest of it and its waited children) and its stdout."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE)
    assert proc.stdout is not None
    out = proc.stdout.read().decode()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 1, out[-400:]
    return usage.ru_maxrss / 1024, out


def test_the_explain_command_streams_a_big_log_in_bounded_memory(tmp_path):
    # GIVEN the same error at the end of a small log and of a 48 MB one
    fragment = (CORPUS / "timeout_rank6_absent.log").read_bytes()
    small, big = tmp_path / "small.out", tmp_path / "big.out"
    _log(small, fragment, 0, 0)
    _log(big, fragment, BIG_MB, 0)
    # WHEN `mldebug explain --json` reads each
    command = [sys.executable, "-m", "mldebug", "explain", "--json"]
    small_mb, _ = _peak_mb([*command, str(small)])
    big_mb, out = _peak_mb([*command, str(big)])
    # THEN it names the same rank, and the big file costs far less than its own size:
    # it never held the file (a whole read alone would add 48 MB of bytes and as much text)
    said = json.loads(out)
    assert said["findings"][0]["kind"] == "timeout_suspect"
    assert said["findings"][0]["ranks"] == [6]
    assert said["sources"][0]["bytes_read"] == big.stat().st_size
    assert big_mb < small_mb + BIG_MB / 3, (small_mb, big_mb)


def _mixed_log(path: Path) -> None:
    """Chatter, one message said over and over, a traceback in the middle (its code lines
    hold none of the words), a line longer than MAX_LINE, no newline at the very end."""
    with open(path, "wb") as out:
        for i in range(3_000):
            out.write(_chatter(20, i * 20))
            out.write(f"{i % 8}: [W socket.cpp:{i}] Warning: retrying to connect\n".encode())
            if i == 1_500:
                out.write((CORPUS / "elastic_sigsegv.log").read_bytes())
                out.write(b"3: Traceback (most recent call last):\n3:   x = step(batch)\n")
                out.write(b"3: RuntimeError: " + b"y" * 10_000 + b"\n")
        out.write(b"5: RuntimeError: the last line")


def test_grep_and_python_keep_the_same_lines(tmp_path):
    assert shutil.which("grep"), "grep is part of every image the tests run on"
    path = tmp_path / "mixed.out"
    _mixed_log(path)
    by_grep = stream.read_log(str(path), STREAM_WORDS)
    by_python = stream.read_log(str(path), STREAM_WORDS, grep=None)
    assert by_grep.lines == by_python.lines
    assert by_grep.count == by_python.count == path.read_bytes().count(b"\n") + 1
    assert by_grep.lines[-1] == (by_grep.count, "5: RuntimeError: the last line")
    long = [text for _, text in by_grep.lines if "yyyy" in text]
    assert long and all(len(t.encode()) <= picked.LINE_BYTES for t in long)
    assert any(text == "3:   x = step(batch)" for _, text in by_grep.lines)  # context kept


def test_past_its_bounds_a_file_keeps_its_ends_and_each_new_message_once(tmp_path, monkeypatch):
    # GIVEN a log whose lines near a word are many more than the bounds
    path = tmp_path / "mixed.out"
    _mixed_log(path)
    monkeypatch.setattr(stream, "HEAD", 500)
    monkeypatch.setattr(stream, "TAIL", 500)
    for grep in ("grep", None):
        got = stream.read_log(str(path), STREAM_WORDS, grep=grep)
        numbers = [n for n, _ in got.lines]
        texts = [text for _, text in got.lines]
        # THEN the lines stay in order, some were dropped and said so, the ends are kept
        assert numbers == sorted(set(numbers)) and got.dropped > 0
        assert len(got.lines) < 500 + 500 + stream.MIDDLE
        assert numbers[0] == 1 and numbers[-1] == got.count
        # the middle's new messages are there with the lines around them; of the warning
        # said 3,000 times, the middle keeps the first it sees and those around new ones
        assert "3:   x = step(batch)" in texts
        assert any("SIGSEGV" in t for t in texts)
        middle = texts[500:-500]
        assert 1 <= sum("retrying to connect" in t for t in middle) <= 12


def _in_parts(monkeypatch, parts: int) -> list[int]:
    """Big files read in `parts` parts at once (any file of a MiB or more), whatever the
    CPUs here; the part counts of each read, as the reads go."""
    monkeypatch.setattr(picked, "SPLIT_BYTES", 1 << 20)
    monkeypatch.setattr(picked, "cpus", lambda: parts)
    seen: list[int] = []
    by_greps = picked._by_greps

    def spy(*args):
        seen.append(len(args[7]))  # the ranges
        return by_greps(*args)

    monkeypatch.setattr(picked, "_by_greps", spy)
    return seen


def test_a_big_log_read_by_a_grep_a_part_at_once_says_what_one_grep_says(tmp_path, monkeypatch):
    # GIVEN a 9 MB log holding every paste of the explain corpus once, chatter between them
    pastes = sorted(CORPUS.glob("*.log"))
    chatter = _chatter(400)
    between = chatter * (1 + (WHOLE_BYTES + (1 << 20)) // len(pastes) // len(chatter))
    path = tmp_path / "slurm-4242.out"
    with open(path, "wb") as out:
        for paste in pastes:
            out.write(between + paste.read_bytes())
    one = explain([str(path)])
    # WHEN it is read by 3 greps at once, each its part of the file
    parts = _in_parts(monkeypatch, 3)
    got = explain([str(path)])
    # THEN the findings, the lines they cite and the line count are one grep's
    assert parts == [3]
    assert len({f.kind for f in one.findings}) > 5
    assert [(*s, f.lines) for s, f in zip(_said(got.findings), got.findings, strict=True)] == [
        (*s, f.lines) for s, f in zip(_said(one.findings), one.findings, strict=True)
    ]
    assert got.sources == one.sources
    assert got.sources[0].lines == path.read_bytes().count(b"\n")


def _picks(path: Path, words, before: int, after: int, grep) -> tuple[int, list]:
    got: list[tuple[int, bytes, bool]] = []

    def start():
        got.clear()
        return lambda number, raw, hit: got.append((number, raw, hit))

    fd = os.open(path, os.O_RDONLY)
    try:
        return picked.pick(fd, str(path), words, start, before, after, grep), got
    finally:
        os.close(fd)


@pytest.mark.parametrize("before,after", [(AROUND, AROUND), (0, 1), (0, 0), (5, 2)])
def test_each_part_hands_on_its_lines_as_a_grep_of_the_whole_file(
    tmp_path, monkeypatch, before, after
):
    # GIVEN logs of words, chatter, empty and long lines, cut in parts wherever they fall
    shuffle = random.Random(before * 10 + after)
    words = ("Watchdog", "rror", "NCCL WARN")
    path = tmp_path / "mixed.out"
    seen = _in_parts(monkeypatch, 1)
    monkeypatch.setattr(picked, "SPLIT_BYTES", 64)  # any file, cut in up to 40 parts
    for trial in range(12):
        lines = [
            shuffle.choice(
                [b"x Error at %d" % i, b"NCCL WARN z", b"", b"long " + b"q" * 9000]
                + [b"chatter %d" % i] * 20
            )
            for i in range(shuffle.randint(1, 400))
        ]
        path.write_bytes(b"\n".join(lines) + b"\n" * (trial % 2))
        # WHEN read by Python alone, and by 1 to 40 greps at once, each its part
        monkeypatch.setattr(picked, "cpus", lambda: 1)
        whole = _picks(path, words, before, after, None)
        for parts in (1, 2, 3, 7, 40):
            monkeypatch.setattr(picked, "cpus", lambda parts=parts: parts)
            monkeypatch.setattr(picked, "MAX_PARTS", parts)
            # THEN each hands on the same lines, numbered alike, and the same line count
            assert _picks(path, words, before, after, "grep") == whole, (trial, parts)
    assert max(seen) > 3  # the parts were read by greps at once


# ---- a big file narrowed: grep reads only the blocks that hold a word (wordblocks.py) ----


def _narrowing(monkeypatch, block: int, most: int) -> list[list[picked.Range]]:
    """Any file read narrowed (Hyperscan asked about blocks of `block` bytes, at most `most`
    stretches grepped); the ranges of each narrowed read, as the reads go."""
    assert wordblocks.available(), "Hyperscan is in the test extra: pip install -e '.[test]'"
    monkeypatch.setattr(picked, "NARROW_BYTES", 0)
    monkeypatch.setattr(wordblocks, "BLOCK", block)
    monkeypatch.setattr(picked, "MAX_RANGES", most)
    seen: list[list[picked.Range]] = []
    narrowed = picked._narrowed

    def spy(*args):
        got = narrowed(*args)
        if got is not None:
            seen.append(got)
        return got

    monkeypatch.setattr(picked, "_narrowed", spy)
    return seen


@pytest.mark.parametrize("before,after", [(AROUND, AROUND), (0, 1), (0, 0), (5, 2)])
def test_a_narrowed_read_hands_on_the_lines_a_grep_of_the_whole_file_does(
    tmp_path, monkeypatch, before, after
):
    # GIVEN logs of chatter with a word here and there (one across a block's end, one in a
    # line longer than a block), empty lines, and logs without any word
    shuffle = random.Random(before * 10 + after)
    words = ("Watchdog", "rror", "NCCL WARN")
    path = tmp_path / "mixed.out"
    narrowed: list[list[picked.Range]] = []
    for trial in range(16):
        block = shuffle.choice([64, 256, 1000])
        seen = _narrowing(monkeypatch, block, shuffle.choice([1, 2, 8]))
        lines = [
            shuffle.choice([b"chatter %d" % i] * 400 + [b"", b"long " + b"q" * 3000])
            for i in range(shuffle.randint(200, 3000))
        ]
        for _ in range(trial % 6):
            at = shuffle.randrange(len(lines))
            lines[at] = shuffle.choice(
                [b"x Error at %d" % at, b"NCCL WARN z", b"q" * 5000 + b"rror"]
            )
        path.write_bytes(b"\n".join(lines) + b"\n" * (trial % 2))
        # WHEN read narrowed, and by one grep of the whole file
        got = _picks(path, words, before, after, "grep")
        monkeypatch.setattr(picked, "NARROW_BYTES", 1 << 62)
        whole = _picks(path, words, before, after, "grep")
        # THEN both hand on the same lines, numbered alike, and the same line count
        assert got == whole, trial
        narrowed += seen
    # and most reads were narrowed (not declined for words all over), some to a few
    # stretches, some to none (no word at all)
    assert len(narrowed) >= 10
    assert any(len(ranges) > 1 for ranges in narrowed)
    assert any(not ranges for ranges in narrowed)


def _blocks_holding(data: bytes, words: tuple[str, ...], block: int) -> list[tuple[int, int]]:
    """The blocks that hold a word, by Python: a word that starts in a block is its."""
    out: list[tuple[int, int]] = []
    for start in range(0, len(data), block):
        end = min(len(data), start + block)
        seen = data[start : end + max(len(w) for w in words) - 1]
        if any(w.encode() in seen for w in words):
            if out and out[-1][1] == start:
                out[-1] = (out[-1][0], end)
            else:
                out.append((start, end))
    return out


@pytest.mark.parametrize("read", [1 << 20, 1000])
def test_hyperscan_finds_the_blocks_that_hold_a_word_as_python_does(tmp_path, monkeypatch, read):
    # GIVEN blocks of 4 KiB of chatter, each of explain's and nccl's words alone in one of
    # them, a block without any between, and a word across two blocks' cut (read whole, or
    # 1,000 bytes at a time: words across those cuts too)
    monkeypatch.setattr(wordblocks, "BLOCK", 4096)
    monkeypatch.setattr(wordblocks, "READ", read)
    words = tuple(dict.fromkeys(STREAM_WORDS + logparse.WORDS))
    chatter = _chatter(100)[:4096]
    data = b"".join(chatter[:998] + w.encode() + chatter[998 + len(w) :] + chatter for w in words)
    data += chatter[:-4] + b"Watchdog" + chatter[4:]
    path = tmp_path / "blocks.out"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        # WHEN Hyperscan is asked which blocks hold any of them, or each alone
        for asked in [words, *((w,) for w in words)]:
            found = wordblocks.blocks(fd, asked, 3)
            # THEN the blocks Python finds them in, the one across the cut in the first
            assert found == _blocks_holding(data, asked, 4096), asked
        assert len(wordblocks.blocks(fd, ("Watchdog",), 2)) == 2
        assert wordblocks.blocks(fd, ("nowhere to be seen",), 2) == []
    finally:
        os.close(fd)


def _grepped(monkeypatch) -> list[list[picked.Range]]:
    """The stretches each read by greps at once covered, as the reads go."""
    seen: list[list[picked.Range]] = []
    by_greps = picked._by_greps

    def spy(*args):
        seen.append(args[7])  # the ranges
        return by_greps(*args)

    monkeypatch.setattr(picked, "_by_greps", spy)
    return seen


def test_the_explain_and_nccl_commands_grep_only_the_blocks_around_the_error(
    tmp_path, monkeypatch, small_findings
):
    # GIVEN a 48 MB log (NARROW_BYTES or more) with an error in its middle
    name = "timeout_rank6_absent.log"
    path = tmp_path / "slurm-4242.out"
    _log(path, (CORPUS / name).read_bytes(), BIG_MB / 2, BIG_MB / 2)
    size = path.stat().st_size
    assert size >= picked.NARROW_BYTES and wordblocks.available()
    # WHEN `mldebug explain` and `mldebug nccl` read it (the functions their commands call)
    grepped = _grepped(monkeypatch)
    got = explain([str(path)])
    (log,) = scan_paths([str(path)]).logs
    # THEN grep read a few blocks around the error, not the file: Hyperscan found them
    assert len(grepped) == 2
    for ranges in grepped:
        assert ranges and sum(r.read_to - r.read_from for r in ranges) < size / 8
    assert _said(got.findings) == small_findings[name]
    assert got.sources[0].lines == log.lines == path.read_bytes().count(b"\n")
    # and without Hyperscan grep reads it all and says the same
    monkeypatch.setattr(wordblocks, "_hs", None)
    whole = explain([str(path)])
    assert [f.lines for f in whole.findings] == [f.lines for f in got.findings]
    assert whole.sources == got.sources and _said(whole.findings) == _said(got.findings)
    (again,) = scan_paths([str(path)]).logs
    assert repr(again.procs) == repr(log.procs) and again.lines == log.lines
    assert all(sum(r.read_to - r.read_from for r in ranges) >= size for ranges in grepped[2:])


def test_a_log_that_grows_while_it_is_narrowed_is_read_as_it_was(tmp_path, monkeypatch):
    # GIVEN a log with an error near its end, and the same log that goes on being written
    # (more lines, some holding words) once Hyperscan has read its blocks
    _narrowing(monkeypatch, 4096, 8)
    lines = [b"chatter %d" % i for i in range(20_000)]
    lines[19_000] = b"x Error at the end"
    before = tmp_path / "before.out"
    before.write_bytes(b"\n".join(lines) + b"\n")
    growing = tmp_path / "growing.out"
    growing.write_bytes(before.read_bytes())
    result = wordblocks.Scan.result

    def then_written(self):
        found = result(self)
        with open(growing, "ab") as out:
            out.write(b"x Error later\n" * 3 + _chatter(50))  # its lines counted from the end
        return found

    monkeypatch.setattr(wordblocks.Scan, "result", then_written)
    # WHEN each is read narrowed
    got = _picks(growing, ("rror",), AROUND, AROUND, "grep")
    monkeypatch.setattr(wordblocks.Scan, "result", result)
    # THEN the growing one hands on the lines it had when the read began, numbered alike
    assert got == _picks(before, ("rror",), AROUND, AROUND, "grep")
    assert got[0] == 20_000 and got[1][AROUND] == (19_001, b"x Error at the end", True)


# ---- the command begins a big log's read before its imports (stream.begin) ----

# `mldebug explain --json LOG` in a fresh interpreter (the engine not yet imported), with
# spies on picked.begin and picked.pick: what each saw, as one JSON line on stderr.
BEGUN_SPY = """
import json, sys
from mldebug.files import picked

seen = {"begun_before_engine": [], "picked_begun": [], "grepped": []}
begin, pick, by_greps = picked.begin, picked.pick, picked._by_greps

def spy_begin(*args, **kwargs):
    heavy = ("mldebug.explain.engine", "mldebug.explain.catalog", "mldebug.model")
    seen["begun_before_engine"].append(not any(name in sys.modules for name in heavy))
    return begin(*args, **kwargs)

def spy_pick(fd, *args):
    begun = args[6] if len(args) > 6 else None
    seen["picked_begun"].append(begun is not None and begun.fd == fd)
    return pick(fd, *args)

def spy_greps(*args):
    seen["grepped"].append(sum(r.read_to - r.read_from for r in args[7]))
    return by_greps(*args)

picked.begin, picked.pick, picked._by_greps = spy_begin, spy_pick, spy_greps
from mldebug.cli import main
code = main(["explain", "--json", sys.argv[1]])
print(json.dumps(seen), file=sys.stderr)
sys.exit(code)
"""


def test_the_explain_command_begins_a_big_logs_read_before_its_imports(tmp_path, small_findings):
    # GIVEN a 48 MB log (NARROW_BYTES or more) with an error in its middle
    name = "timeout_rank6_absent.log"
    path = tmp_path / "slurm-4242.out"
    _log(path, (CORPUS / name).read_bytes(), BIG_MB / 2, BIG_MB / 2)
    size = path.stat().st_size
    assert size >= picked.NARROW_BYTES and wordblocks.available()
    # WHEN `mldebug explain --json` reads it as a user runs it (a fresh interpreter)
    done = subprocess.run(
        [sys.executable, "-c", BEGUN_SPY, str(path)], capture_output=True, text=True
    )
    assert done.returncode == 1, done.stderr[-600:]
    seen = json.loads(done.stderr.strip().splitlines()[-1])
    # THEN its read began before the engine, the catalog and the model were imported
    # (Hyperscan's threads and `wc -l` ran beside the imports), the read carried on from it, grep read only the blocks
    # around the error, and the report is what explain() says of the file
    assert seen["begun_before_engine"] == [True]
    assert seen["picked_begun"] == [True]
    assert len(seen["grepped"]) == 1 and seen["grepped"][0] < size / 8
    said = json.loads(done.stdout)
    got = explain([str(path)])
    assert [f["kind"] for f in said["findings"]] == [f.kind for f in got.findings]
    assert [f[0] for f in small_findings[name]] == [f.kind for f in got.findings]
    assert said["sources"][0]["lines"] == got.sources[0].lines == path.read_bytes().count(b"\n")


def test_the_words_written_out_for_a_big_logs_read_are_the_catalogs():
    # stream.WORDS is what the catalog and mldebug.nccl's keywords make, written out so
    # that a big log's read begins before they are imported: when a reader's cue changes,
    # write them again (print(engine.stream_words()))
    assert stream.WORDS == engine_stream_words()


def test_a_read_begun_on_one_file_is_not_carried_on_to_another(tmp_path, monkeypatch):
    # GIVEN a read begun on one log, then another log in its place (same name)
    _narrowing(monkeypatch, 4096, 8)
    first, second = tmp_path / "slurm-1.out", tmp_path / "slurm-2.out"
    first.write_bytes(b"x Error in the first\n" + _chatter(2_000))
    second.write_bytes(_chatter(3_000) + b"x Error in the second\n")
    begun = stream.begin([str(first)], ("rror",))
    try:
        assert len(begun) == 1
        os.replace(second, first)
        # WHEN the file now there is read with it
        got = stream.read_log(str(first), ("rror",), begun=begun)
    finally:
        for read in begun:
            read.stop()
    # THEN it is read as itself: the begun read was another file's
    assert (3_001, "x Error in the second") in got.lines
    assert got.count == 3_001 and got.size == first.stat().st_size
    assert not any("first" in text for _, text in got.lines)
    # and stdin or a file named as a profiler trace (read as one, not as a log) is not begun
    trace = tmp_path / "rank0.pt.trace.json"
    trace.write_bytes(first.read_bytes())
    assert stream.begin(["-", str(trace)], ("rror",)) == []


def test_the_line_count_of_a_file_that_grew_is_of_the_bytes_asked(tmp_path):
    # GIVEN a file that grew after its size was taken (wc -l reads it to its new end)
    path = tmp_path / "growing.out"
    path.write_bytes(b"line\n" * 1_000)
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        with open(path, "ab") as out:
            out.write(b"later\n" * 500)
        # WHEN the whole file's lines up to that size are counted
        counted = picked._counter(fd, str(path), size)
        # THEN they are the lines in those bytes, counted again exactly
        assert counted.lines() == 1_000
        counted.stop()
        again = picked._counter(fd, str(path), path.stat().st_size)  # a file that did not
        assert again.lines() == 1_500 and again.proc is not None
        again.stop()
    finally:
        os.close(fd)
