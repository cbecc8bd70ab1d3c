"""Reading a rank's state.json (docs/agent.md): the documented example, and anything else."""

import json
import os
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from mldebug.collect.agentstate import parse_state, read_state

EXAMPLE = Path(__file__).parent / "data" / "agent" / "state_rank1.json"


def run_with_state(tmp_path, content: bytes, rank: int = 1) -> Path:
    folder = tmp_path / "ranks" / str(rank)
    folder.mkdir(parents=True)
    (folder / "state.json").write_bytes(content)
    return tmp_path


def test_the_documented_example_reads_whole(tmp_path):
    state = read_state(run_with_state(tmp_path, EXAMPLE.read_bytes()), 1)
    assert (state.rank, state.pid, state.step, state.time) == (1, 4242, 12, 1767225600.5)
    (group,) = state.groups
    assert (group.group, group.size) == ("default_pg", 4)
    assert (group.enqueued.seq, group.enqueued.op, group.enqueued.site) == (
        37,
        "all_reduce",
        "/job/train.py:48",
    )
    assert group.enqueued.shapes == ((1024,),) and group.enqueued.dtypes == ("float32",)
    assert (group.completed.seq, group.completed.completed) == (36, 1767225599.9)
    assert [c.seq for c in state.trace] == [36, 37]
    assert state.trace[-1].completed is None and state.trace[0].completed == 1767225599.9
    assert state.memory.rss == 304087040 and state.memory.cuda_num_ooms == 0
    assert state.memory.nvml_used is None
    assert state.memory_history == ((12, 1767225600.1, 304087040, 0),)


def test_a_state_of_another_rank_or_version_is_none(tmp_path):
    data = json.loads(EXAMPLE.read_text())
    assert parse_state(data, 2) is None
    assert parse_state({**data, "version": 2}, 1) is None
    assert parse_state({**data, "time": "now"}, 1) is None


def test_a_symlink_or_fifo_at_state_json_is_no_state(tmp_path):
    folder = tmp_path / "ranks" / "1"
    folder.mkdir(parents=True)
    os.mkfifo(folder / "state.json")
    assert read_state(tmp_path, 1) is None
    os.unlink(folder / "state.json")
    (tmp_path / "elsewhere.json").write_text(EXAMPLE.read_text())
    os.symlink(tmp_path / "elsewhere.json", folder / "state.json")
    assert read_state(tmp_path, 1) is None


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(
    field=st.sampled_from(["step", "groups", "trace", "memory", "memory_history", "pid"]),
    value=json_values,
)
def test_any_value_in_any_field_is_read_without_error(field, value):
    data = json.loads(EXAMPLE.read_text())
    data[field] = value
    state = parse_state(data, 1)
    assert state is not None and state.rank == 1
