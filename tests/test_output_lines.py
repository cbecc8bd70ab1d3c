"""LineSplitter: bytes in, whole display lines out."""

from mldebug.launch.lines import MAX_PENDING, LineSplitter


def feed_all(splitter, chunks, now=0.0):
    lines = []
    for chunk in chunks:
        lines += splitter.feed(chunk, now)
    return lines


def test_whole_lines_pass_through():
    assert LineSplitter().feed(b"a\nbb\n", 0) == [b"a", b"bb"]


def test_a_line_written_in_pieces_comes_out_once_and_whole():
    splitter = LineSplitter()
    assert feed_all(splitter, [b"wri", b"tten ", b"in pieces"]) == []
    assert splitter.feed(b"\nnext", 0) == [b"written in pieces"]
    assert splitter.finish() == [b"next"]


def test_unfinished_line_is_kept_until_the_stream_ends():
    splitter = LineSplitter()
    assert splitter.feed(b"no newline", 0) == []
    assert splitter.finish() == [b"no newline"]
    assert splitter.finish() == []


def test_crlf_is_one_line_even_when_split_between_reads():
    splitter = LineSplitter()
    assert splitter.feed(b"dos line\r", 0) == []
    assert splitter.feed(b"\n", 0) == [b"dos line"]


def test_progress_bar_is_throttled_and_ends_with_its_final_state():
    splitter = LineSplitter(progress_interval=1.0)
    shown = splitter.feed(b"\r 0%\r 10%", 0.0)
    assert shown == [b" 0%"]  # the first drawing shows at once
    assert splitter.feed(b"\r 20%\r 30%", 0.5) == []  # too soon
    assert splitter.feed(b"\r 40%", 1.2) == [b" 30%"]  # newest complete drawing
    assert splitter.feed(b"\r100%\n", 1.3) == [b"100%"]  # the newline shows the final state


def test_progress_bar_without_final_newline_shows_last_state_at_end():
    splitter = LineSplitter()
    splitter.feed(b"\rstep 1\rstep 2", 0.0)
    assert splitter.finish() == [b"step 2"]


def test_poll_shows_a_drawing_that_waited_long_enough():
    splitter = LineSplitter(progress_interval=1.0)
    assert splitter.feed(b"\ra\rb\rc", 0.0) == [b"b"]
    assert splitter.feed(b"\rd", 0.1) == []
    assert splitter.poll(0.5) == []
    assert splitter.poll(1.5) == [b"c"]


def test_carriage_return_inside_a_finished_line_keeps_the_last_drawing():
    assert LineSplitter().feed(b"old text\rnew\n", 0) == [b"new"]
    assert LineSplitter().feed(b"text\r\r\n", 0) == [b"text"]


def test_invalid_utf8_passes_through_untouched():
    assert LineSplitter().feed(b"\xff\xfe\n", 0) == [b"\xff\xfe"]


def test_huge_line_without_newline_is_cut_rather_than_held_forever():
    splitter = LineSplitter()
    lines = splitter.feed(b"x" * (MAX_PENDING + 10), 0)
    assert lines == [b"x" * (MAX_PENDING + 10)]
    assert splitter.finish() == []
