"""The pipe reader: logs and console from the ranks' pipes, and what must never stall them."""

import os
import signal
import subprocess
import sys
import threading
import time

from mldebug.launch.output import Console
from mldebug.launch.pipes import Logs, PipeReader, Stream, make_pipe


def wait_for(predicate, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition never became true"
        time.sleep(0.02)


class Collector:
    """A console whose output is read into memory as it comes."""

    def __init__(self):
        self.read_fd, write_fd = os.pipe()
        self.console = Console(stdout_fd=write_fd, stderr_fd=write_fd)
        self.data = bytearray()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self):
        while chunk := os.read(self.read_fd, 1 << 16):
            self.data.extend(chunk)

    def text(self) -> str:
        return bytes(self.data).decode()

    def close(self) -> str:
        os.close(self.console.fds["stdout"])
        self._thread.join()
        os.close(self.read_fd)
        return self.text()


def child(code: str, write_fd: int) -> subprocess.Popen:
    """A process whose stdout is the write end of a pipe (closed here once it has it)."""
    try:
        return subprocess.Popen([sys.executable, "-c", code], stdout=write_fd)
    finally:
        os.close(write_fd)


def logs_for(tmp_path):
    errors, full = [], []
    return Logs(tmp_path, full.append, errors.append), errors, full


def test_a_flood_from_one_rank_does_not_hold_back_another(tmp_path):
    """Rank 0 writes without a pause; rank 1's single line is still shown (and kept)."""
    logs, _, _ = logs_for(tmp_path)
    console = Collector()
    reader = PipeReader(console.console)
    flood_read, flood_write = make_pipe(1 << 16)
    line_read, line_write = make_pipe(1 << 16)
    reader.add(Stream(flood_read, logs.open(tmp_path / "0.log"), 0, "stdout", b"[0] ", True))
    reader.add(Stream(line_read, logs.open(tmp_path / "1.log"), 1, "stdout", b"[1] ", True))
    reader.start()
    flood = child("import sys\nwhile True: sys.stdout.write('x' * 999 + '\\n')", flood_write)
    try:
        wait_for(lambda: (tmp_path / "0.log").stat().st_size > 4 << 20)
        one = child("print('rank 1 is here')", line_write)
        one.wait()
        wait_for(lambda: "[1] rank 1 is here\n" in console.text())
        assert flood.poll() is None  # the flood never stopped meanwhile
    finally:
        flood.kill()
        flood.wait()
    reader.rank_ended(0)
    reader.finish()
    console.close()
    assert (tmp_path / "1.log").read_bytes() == b"rank 1 is here\n"


def test_a_rank_killed_mid_write_loses_nothing(tmp_path):
    """Everything a rank wrote before SIGKILL is in its log and on the console, its last
    unfinished line included."""
    logs, _, _ = logs_for(tmp_path)
    console = Collector()
    reader = PipeReader(console.console)
    read_fd, write_fd = make_pipe(1 << 20)
    reader.add(Stream(read_fd, logs.open(tmp_path / "0.log"), 0, "stdout", b"[0] ", True))
    reader.start()
    code = (
        "import os, signal\n"
        "for i in range(20000): os.write(1, b'line %d\\n' % i)\n"
        "os.write(1, b'unfinished')\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    rank = child(code, write_fd)
    assert rank.wait() == -signal.SIGKILL
    reader.rank_ended(0)
    reader.finish()
    shown = console.close().splitlines()
    expected = [f"line {i}" for i in range(20000)] + ["unfinished"]
    assert shown == [f"[0] {line}" for line in expected]
    assert (tmp_path / "0.log").read_text() == "\n".join(expected)


def test_a_console_that_blocks_never_stalls_the_ranks(tmp_path, monkeypatch):
    """Nobody reads the console (a paused terminal): the rank still runs to its end, its log
    gets everything, and what the console could not take is said to be missing there."""
    monkeypatch.setattr("mldebug.launch.pipes.MAX_PENDING", 1 << 20)
    logs, _, _ = logs_for(tmp_path)
    stuck_read, stuck_write = os.pipe()
    reader = PipeReader(Console(stdout_fd=stuck_write, stderr_fd=stuck_write))
    read_fd, write_fd = make_pipe(1 << 16)
    reader.add(Stream(read_fd, logs.open(tmp_path / "0.log"), 0, "stdout", b"[0] ", True))
    reader.start()
    rank = child("import sys\nfor i in range(100000): print('y' * 99)", write_fd)
    assert rank.wait(timeout=120) == 0  # 10 MB through a console nobody reads
    wait_for(lambda: (tmp_path / "0.log").stat().st_size == 100000 * 100)
    received = bytearray()
    draining = threading.Thread(
        target=lambda: [received.extend(c) for c in iter(lambda: os.read(stuck_read, 1 << 16), b"")]
    )
    draining.start()  # the terminal comes back
    reader.rank_ended(0)
    reader.finish()
    os.close(stuck_write)
    draining.join()
    os.close(stuck_read)
    text = received.decode()
    assert "bytes of 0.log not shown (the console could not keep up)" in text
    assert text.count("[0] " + "y" * 99 + "\n") < 100000


def test_without_a_console_only_the_logs_are_written_until_one_is_shown(tmp_path):
    logs, _, _ = logs_for(tmp_path)
    reader = PipeReader(None)
    read_fd, write_fd = make_pipe(1 << 16)
    reader.add(Stream(read_fd, logs.open(tmp_path / "0.log"), 0, "stdout", b"[0] ", True))
    reader.start()
    os.write(write_fd, b"before\n")
    wait_for(lambda: (tmp_path / "0.log").read_bytes() == b"before\n")
    console = Collector()
    reader.show(console.console)
    os.write(write_fd, b"after\n")
    os.close(write_fd)
    reader.finish()
    assert console.close() == "[0] after\n"
    assert (tmp_path / "0.log").read_bytes() == b"before\nafter\n"


def test_a_log_that_cannot_be_written_is_said_once_and_counts_what_it_misses(tmp_path):
    logs, errors, full = logs_for(tmp_path)
    os.mkfifo(tmp_path / "planted.log")  # not a regular file: refused
    log = logs.open(tmp_path / "planted.log")
    log.write(b"abc")
    log.write(b"de")
    assert [e.name for e in errors] == ["planted.log"] and full == []
    assert (log.incomplete_from, log.lost) == (0, 5)
    assert logs.incomplete() == {"planted.log": 0}
    good = logs.open(tmp_path / "good.log")
    good.write(b"fine\n")
    assert logs.incomplete() == {"planted.log": 0}  # a log that missed nothing is complete


def test_a_slow_console_that_keeps_reading_gets_every_line(tmp_path, monkeypatch):
    """A console slower than the rank (but never stuck) holds the rank back instead of
    losing lines, as a terminal would."""
    monkeypatch.setattr("mldebug.launch.pipes.MAX_PENDING", 256 << 10)
    logs, _, _ = logs_for(tmp_path)
    slow_read, slow_write = os.pipe()
    received = bytearray()

    def read_slowly():
        while chunk := os.read(slow_read, 1 << 14):
            received.extend(chunk)
            time.sleep(0.002)

    reader_thread = threading.Thread(target=read_slowly)
    reader_thread.start()
    reader = PipeReader(Console(stdout_fd=slow_write, stderr_fd=slow_write))
    read_fd, write_fd = make_pipe(1 << 16)
    reader.add(Stream(read_fd, logs.open(tmp_path / "0.log"), 0, "stdout", b"[0] ", True))
    reader.start()
    rank = child("for i in range(40000): print('line', i, 'z' * 90)", write_fd)
    assert rank.wait(timeout=120) == 0
    reader.rank_ended(0)
    reader.finish()
    os.close(slow_write)
    reader_thread.join()
    os.close(slow_read)
    lines = received.decode().splitlines()
    assert lines == [f"[0] line {i} " + "z" * 90 for i in range(40000)]


def test_a_bug_in_showing_output_never_holds_the_ranks_back(tmp_path, monkeypatch):
    """Should cutting lines fail (a bug), the rank still runs to its end, its log gets
    everything, and the failure is said once."""

    class Broken:
        def feed(self, data, now):
            raise RuntimeError("splitter bug")

        def poll(self, now):
            return []

        def finish(self):
            return []

    monkeypatch.setattr("mldebug.launch.pipes.LineSplitter", Broken)
    monkeypatch.setattr("mldebug.launch.pipes.MAX_PENDING", 64 << 10)
    logs, _, _ = logs_for(tmp_path)
    console = Collector()
    said = []
    reader = PipeReader(console.console, on_crash=said.append)
    read_fd, write_fd = make_pipe(1 << 16)
    reader.add(Stream(read_fd, logs.open(tmp_path / "0.log"), 0, "stdout", b"[0] ", True))
    reader.start()
    rank = child("for i in range(20000): print('w' * 99)", write_fd)
    assert rank.wait(timeout=120) == 0
    reader.rank_ended(0)
    reader.finish()
    console.close()
    assert (tmp_path / "0.log").stat().st_size == 20000 * 100
    assert len(said) == 1 and "internal error while showing the ranks' output" in said[0]
