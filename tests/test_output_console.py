"""Console formatting and rank filtering, and the tailer over real files."""

import os

from mldebug.files.rundir import RunPaths
from mldebug.launch.output import LAUNCHER, Console, OutputTailer, RankFilter, format_line


def test_format_line_prefixes_and_replaces_bad_utf8():
    assert format_line(b"[h:1] ", b"ok \xff") == "[h:1] ok \ufffd\n".encode()


def test_rank_filter_by_global_and_local_rank():
    both = RankFilter(ranks=frozenset({0, 1, 2}), local_ranks=frozenset({1}))
    assert both.shows(1, 1)
    assert not both.shows(2, 2)
    assert not both.shows(5, 1)
    assert both.shows(LAUNCHER, None)
    assert RankFilter().shows(7, None)


def test_tailer_shows_new_ranks_and_flushes_partial_lines(tmp_path):
    paths = RunPaths(tmp_path)
    read_fd, write_fd = os.pipe()
    console = Console(stdout_fd=write_fd, stderr_fd=write_fd)
    tailer = OutputTailer(
        paths,
        console,
        "h",
        local_ranks={0: 0, 1: 1},
        rank_filter=RankFilter(ranks=frozenset({0, 1})),
    )
    tailer.start()
    for rank in (0, 1, 2):
        paths.rank_dir(rank).mkdir(parents=True)
        paths.stdout(rank).write_bytes(f"rank {rank} says hi\npartial {rank}".encode())
        paths.stderr(rank).write_bytes(b"")
    tailer.finish()
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as reader:
        lines = sorted(reader.read().decode().splitlines())
    assert lines == [
        "[h:0] partial 0",
        "[h:0] rank 0 says hi",
        "[h:1] partial 1",
        "[h:1] rank 1 says hi",
    ]


def test_tailer_reads_a_flood_to_the_end_when_it_finishes(tmp_path):
    paths = RunPaths(tmp_path / "run")
    paths.rank_dir(0).mkdir(parents=True)
    lines = [f"line {i:07d} " + "x" * 40 for i in range(150_000)]  # ~8 MiB: several looks
    paths.stdout(0).write_text("\n".join(lines) + "\n")
    out = os.open(tmp_path / "console", os.O_WRONLY | os.O_CREAT, 0o600)
    tailer = OutputTailer(paths, Console(stdout_fd=out, stderr_fd=out), "h", local_ranks={0: 0})
    tailer.start()
    tailer.finish()
    os.close(out)
    shown = (tmp_path / "console").read_text().splitlines()
    assert shown == [f"[h:0] {line}" for line in lines]


def test_console_waits_for_a_full_non_blocking_output():
    """A terminal or pipe left non-blocking by another program refuses writes while it is
    full: the console waits for room rather than taking it for closed and going quiet."""
    import threading

    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    console = Console(stdout_fd=write_fd, stderr_fd=write_fd)
    data = b"x" * (1 << 20)  # far more than a pipe holds
    received = bytearray()

    def read_all():
        while chunk := os.read(read_fd, 1 << 16):
            received.extend(chunk)

    reader = threading.Thread(target=read_all)
    reader.start()
    console.write("stdout", data)
    console.write("stdout", b"after\n")
    os.close(write_fd)
    reader.join()
    os.close(read_fd)
    assert not console.broken
    assert bytes(received) == data + b"after\n"
