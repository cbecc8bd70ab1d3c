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


def test_a_view_reads_again_only_the_state_files_that_changed(tmp_path):
    """The live view asks for every rank's state at every poll (collect.agentstate
    StateReader): a file the agent has not replaced since is not read again."""
    import time

    from testkit.agent_states import heartbeat_state

    from mldebug.collect.agentstate import StateReader
    from mldebug.files.rundir import RunPaths
    from mldebug.files.safeio import make_private_dir, write_json_atomic
    from mldebug.model import RankTarget

    paths = RunPaths(make_private_dir(tmp_path / "run"))
    make_private_dir(paths.ranks_dir)
    targets = [RankTarget(pid=100 + r, rank=r, run_dir=str(paths.root)) for r in range(3)]

    def beat(rank: int, step: int) -> None:
        make_private_dir(paths.rank_dir(rank))
        state = heartbeat_state(rank, 100 + rank, time.time(), step=step)
        write_json_atomic(paths.state_file(rank), state)

    for rank in range(3):
        beat(rank, 7)
    reader = StateReader()
    first = reader.read(targets)
    assert reader.reads == 3 and {s.step for s in first.values()} == {7}
    # WHEN nothing changed, then rank 1's agent writes again
    assert reader.read(targets) == first and reader.reads == 3
    beat(1, 8)
    again = reader.read(targets)
    # THEN only rank 1's file is read again, and says its new step
    assert reader.reads == 4
    assert {pid: s.step for pid, s in again.items()} == {100: 7, 101: 8, 102: 7}
    # A file replaced by a link to another is read again, and refused (never followed).
    paths.state_file(2).unlink()
    paths.state_file(2).symlink_to(paths.state_file(0))
    assert set(reader.read(targets)) == {100, 101} and reader.reads == 5
