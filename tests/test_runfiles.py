"""Reading the run directory for the Logs, NCCL and Anomalies tabs: bounded and lenient."""

from __future__ import annotations

import json
import os

from mldebug.live import runfiles
from mldebug.live.runfiles import RunFilesReader, parse_event_line, read_tail
from mldebug.tui.widgets.logs_view import select_lines


def test_tail_reads_only_the_end_and_drops_the_cut_line(tmp_path):
    path = tmp_path / "out.log"
    path.write_text("".join(f"line {i}\n" for i in range(10_000)))
    lines = read_tail(path, max_bytes=100, max_lines=5)
    assert lines == [f"line {i}" for i in range(9995, 10_000)]
    assert read_tail(tmp_path / "missing.log") == []


def test_progress_bars_keep_what_a_terminal_shows(tmp_path):
    path = tmp_path / "out.log"
    path.write_bytes(b"epoch 1\n 10%\r 50%\r100%\n\xff bad byte\n")
    assert read_tail(path) == ["epoch 1", "100%", "\ufffd bad byte"]


def test_event_lines_are_parsed_and_bad_ones_skipped():
    event = parse_event_line(
        3,
        json.dumps(
            {"time": 5.0, "kind": "inf", "message": "Inf in grad", "file": "m.py", "line": 9}
        ),
    )
    assert (event.rank, event.kind, event.location) == (3, "inf", "m.py:9")
    assert parse_event_line(3, "{broken") is None
    assert parse_event_line(3, "[1, 2]") is None


def test_unchanged_files_are_not_read_again(tmp_path):
    log = tmp_path / "ranks" / "0" / "stdout.log"
    log.parent.mkdir(parents=True)
    log.write_text("a\n")
    reader = RunFilesReader(tmp_path)
    first = reader.read()
    assert first.logs[0].lines == ("a",)
    log.write_text("a\nb\n")
    assert reader.read().logs[0].lines == ("a", "b")
    assert reader.read().nccl == () and reader.read().nccl_files_total == 0


def test_log_lines_filtered_by_rank_set_and_text(tmp_path):
    for rank in range(3):
        path = tmp_path / "ranks" / str(rank) / "stdout.log"
        path.parent.mkdir(parents=True)
        path.write_text(f"loss {rank}\nstep done\n")
    logs = RunFilesReader(tmp_path).read().logs
    lines, note = select_lines(logs, "1-2", "LOSS")
    assert lines == ["[1]  loss 1", "[2]  loss 2"] and note == ""
    lines, note = select_lines(logs, "x", "")
    assert len(lines) == 6 and "not a rank set" in note


def test_only_the_log_lines_shown_are_built_however_many_ranks():
    from mldebug.model import LogTail
    from mldebug.tui.widgets.logs_view import MAX_SHOWN_LINES

    built = []

    class Line(str):
        def __format__(self, spec):  # called once per line put in the view
            built.append(self)
            return str.__format__(self, spec)

    logs = tuple(
        LogTail(rank, stream, tuple(Line(f"rank {rank} step {i}") for i in range(200)))
        for rank in range(1024)
        for stream in ("stdout", "stderr")
    )
    lines, note = select_lines(logs, "", "")
    assert len(built) == len(lines) == MAX_SHOWN_LINES
    assert lines[-1] == "[1023]  rank 1023 step 199" and lines[0].startswith("[1016]")
    assert note == f"Showing the last {MAX_SHOWN_LINES} of {1024 * 2 * 200} lines. "


def test_terminal_control_sequences_a_rank_writes_never_reach_the_screen(tmp_path):
    # GIVEN a rank that writes colours, a screen clear, a window title and CRLF line ends,
    # and an event whose message carries an escape sequence
    folder = tmp_path / "ranks" / "0"
    folder.mkdir(parents=True)
    (folder / "stdout.log").write_bytes(
        b"\x1b[32mINFO\x1b[0m step 1\r\n\x1b[2J\x1b]0;title\x07cleared\nbell\x07 and nul\x00\n"
    )
    (folder / "events.jsonl").write_text(
        json.dumps({"time": 1.0, "kind": "nan", "message": "\x1b[31mNaN\x1b[0m in loss"}) + "\n"
    )
    files = RunFilesReader(tmp_path).read()
    # THEN what the view draws is the text, without the control sequences
    assert files.logs[0].lines == ("INFO step 1", "cleared", "bell and nul")
    assert files.events[0].message == "NaN in loss"


def test_an_event_line_nested_too_deep_is_a_bad_line_not_a_failed_poll(tmp_path):
    events = tmp_path / "ranks" / "0" / "events.jsonl"
    events.parent.mkdir(parents=True)
    good = json.dumps({"time": 5.0, "kind": "nan", "message": "NaN in loss"})
    events.write_text("[" * 60_000 + "\n" + good + "\n")
    files = RunFilesReader(tmp_path).read()
    assert [event.message for event in files.events] == ["NaN in loss"]
    assert files.bad_event_lines == 1


def test_fifos_in_place_of_logs_and_events_are_skipped_without_blocking(tmp_path):
    rank_dir = tmp_path / "ranks" / "0"
    rank_dir.mkdir(parents=True)
    for name in ("stdout.log", "stderr.log", "events.jsonl"):
        os.mkfifo(rank_dir / name)
    (tmp_path / "nccl").mkdir()
    os.mkfifo(tmp_path / "nccl" / "node.1.log")
    files = RunFilesReader(tmp_path).read()
    assert files.logs == () and files.events == ()
    assert files.nccl == (("node.1.log", ()),)


def test_one_poll_looks_at_a_bounded_number_of_rank_directories(tmp_path, monkeypatch):
    for rank in range(3):
        log = tmp_path / "ranks" / str(rank) / "stdout.log"
        log.parent.mkdir(parents=True)
        log.write_text(f"rank {rank} says hi\n")
    monkeypatch.setattr(runfiles, "MAX_RANK_DIRS", 2)
    files = RunFilesReader(tmp_path).read()
    assert [tail.rank for tail in files.logs] == [0, 1]
