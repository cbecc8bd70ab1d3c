"""py-spy JSON parsing and error classification, against output recorded from real py-spy."""

from pathlib import Path

import pytest

from mldebug.analysis.frames import collective_op, user_frame
from mldebug.collect.pyspy import classify_pyspy_error, find_pyspy, parse_pyspy_json
from mldebug.model import FAIL_ERROR, FAIL_EXITED, FAIL_NOT_PYTHON, FAIL_PERMISSION

DATA = Path(__file__).parent / "data"


def load(name: str) -> str:
    return (DATA / name).read_text()


def test_all_reduce_rank_parses_outermost_first_with_user_frame_and_op():
    threads = parse_pyspy_json(load("pyspy_all_reduce.json"), pid=3574)
    assert [t.name for t in threads] == ["MainThread"]
    frames = threads[0].frames
    assert frames[0].function == "<module>"
    assert frames[-1].function == "all_reduce"
    assert frames[-1].file.endswith("torch/distributed/distributed_c10d.py")
    # torch >= 2.2 wraps the op in c10d_logger's wrapper; py-spy 0.4 qualifies its name.
    assert frames[-2].function == "_exception_logger.<locals>.wrapper"
    assert collective_op(frames) == "all_reduce"
    found = user_frame(frames)
    assert (found.function, found.line) == ("sync_gradients", 64)
    assert found.file.endswith("tests/jobs/hang_job.py")


def test_all_gather_rank_names_its_op():
    frames = parse_pyspy_json(load("pyspy_all_gather.json"))[0].frames
    assert collective_op(frames) == "all_gather"
    assert user_frame(frames).function == "gather_metrics"


def test_main_thread_leads_and_other_threads_are_kept():
    threads = parse_pyspy_json(load("pyspy_two_threads.json"))
    assert [t.name for t in threads] == ["MainThread", "helper"]
    helper = threads[1]
    assert helper.frames[0].function == "Thread._bootstrap"  # qualified name from py-spy 0.4
    assert helper.frames[-1].function == "<lambda>"
    assert user_frame(threads[0].frames).function == "inner"


def test_native_frames_are_marked_and_addresses_made_comparable():
    frames = parse_pyspy_json(load("pyspy_all_reduce_native.json"))[0].frames
    native = [f for f in frames if f.native]
    assert native, "the --native dump has C frames"
    assert all(f.line is None for f in native)
    assert not any(f.function.startswith("0x") for f in native)
    assert collective_op(frames) == "all_reduce"
    assert user_frame(frames).function == "sync_gradients"


@pytest.mark.parametrize("text", ["", "{}", '[{"thread_id": 1}]', "not json"])
def test_bad_output_is_a_value_error(text):
    with pytest.raises(ValueError):
        parse_pyspy_json(text)


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("pyspy_error_no_process.txt", FAIL_EXITED),
        ("pyspy_error_not_python.txt", FAIL_NOT_PYTHON),
        ("pyspy_error_permission.txt", FAIL_PERMISSION),
    ],
)
def test_errors_are_classified(name, kind):
    found, detail = classify_pyspy_error(load(name))
    assert found == kind
    assert detail and "\n" not in detail


def test_unknown_error_keeps_its_first_line():
    assert classify_pyspy_error("Error: something odd\nmore") == (FAIL_ERROR, "something odd")


def test_pyspy_is_found_next_to_the_interpreter():
    assert Path(find_pyspy()).name == "py-spy"
