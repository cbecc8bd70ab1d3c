"""The agent's timing part (mldebug/agent/timing.py) in this process: a step's wall time
split into collectives, data and host syncs; the real DataLoader timed through the real
hook; the section state.json carries, read back by the collector."""

from __future__ import annotations

import time

import pytest

from mldebug import rankrules
from mldebug.agent import collectives, timing
from mldebug.collect.agenttiming import parse_timing


def completed_call(tracer, group, seq, entered, done, asynchronous=False):
    call = collectives.Call(group, seq, "all_reduce", None, entered, asynchronous, [], [], None)
    call.completed = done
    return call


def test_a_step_is_split_into_collectives_data_syncs_and_the_rest():
    part = timing.Timing(None, rankrules)
    group = collectives.Group("default_pg", 2)
    part.on_step(1, 100.0)  # the first step's start is not known: left out
    part.collective_done(completed_call(None, group, 1, 100.2, 100.5))
    part.collective_done(completed_call(None, group, 2, 100.5, 100.9, asynchronous=True))
    part.data_waited(object(), 0.1, None)
    part.sync_waited(0.05, None)
    part.on_step(2, 101.0)
    section = part.section()
    assert section["steps"] == [[2, 100.0, 1.0, pytest.approx(0.3), 0.1, 0.05]]
    assert [row[:2] for row in section["calls"]] == [["default_pg", 1], ["default_pg", 2]]
    parsed = parse_timing(section)
    assert parsed.steps[0].compute == pytest.approx(0.55)
    assert parsed.calls[1].asynchronous  # async: recorded, not counted as a wait


def test_the_real_dataloader_is_timed_with_its_dataset_workers_and_line(monkeypatch):
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader, TensorDataset, dataloader

    monkeypatch.setattr(
        dataloader._BaseDataLoaderIter, "__next__", dataloader._BaseDataLoaderIter.__next__
    )
    part = timing.Timing(None, rankrules)
    timing.install_dataloader(dataloader, part)
    loader = DataLoader(TensorDataset(torch.zeros(16, 2)), batch_size=4)
    for _epoch in range(3):
        for _batch in loader:  # LOOP_LINE
            pass
    (entry,) = part.section()["loaders"]
    assert entry["dataset"] == "TensorDataset" and entry["num_workers"] == 0
    assert entry["batches"] == 12 + 3  # the StopIteration of each epoch counts as a wait
    assert entry["site"].startswith(__file__ + ":")
    assert part._data > 0


def test_host_syncs_on_cpu_tensors_are_not_counted(monkeypatch):
    torch = pytest.importorskip("torch")
    for name in timing.SYNC_METHODS:
        monkeypatch.setattr(torch.Tensor, name, getattr(torch.Tensor, name))
    part = timing.Timing(None, rankrules)
    timing.install_syncs(torch, part)
    assert torch.ones(3).sum().item() == 3.0
    assert torch.ones(2).tolist() == [1.0, 1.0]
    assert part._sync == 0.0 and part.section()["syncs"] == []


def test_the_main_thread_is_sampled_where_it_works():
    part = timing.Timing(None, rankrules)
    part.sample_main()
    assert part.section()["work"] == []  # before the first step: set-up, not work
    part.on_step(1, time.time())
    part.sample_main()
    (row,) = part.section()["work"]
    assert row[0].startswith(__file__ + ":")


def test_windows_are_bounded():
    part = timing.Timing(None, rankrules)
    group = collectives.Group("g", 2)
    for seq in range(1, 1000):
        part.collective_done(completed_call(None, group, seq, float(seq), seq + 0.5))
        part.on_step(seq, float(seq))
        part.sync_waited(0.001, None)
    section = part.section()
    assert len(section["calls"]) == timing.MAX_CALLS and len(section["steps"]) == timing.MAX_STEPS


def test_timing_can_be_turned_off():
    assert timing.enabled({}) and not timing.enabled({"MLDEBUG_TIMING": "0"})
