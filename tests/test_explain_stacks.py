"""py-spy dumps of several ranks pasted into `mldebug explain`: judged by `dump`'s own
cross-rank analysis (analysis.find_problems), written in py-spy's dump format with our own
pids and paths (modelled on huggingface/accelerate#3104, a ZeRO-3 hang, and
pytorch/pytorch#119845, a DataLoader worker stuck under distributed training)."""

from __future__ import annotations

from mldebug.explain.engine import explain_text


def dump(pid: int, frames: list[str], threads: str = "", prefix: str = "") -> str:
    head = [f"Process {pid}: python -u train.py", "Python v3.11.9 (/usr/bin/python3.11)", ""]
    body = [f'Thread {pid} (idle): "MainThread"'] + [f"    {f}" for f in frames]
    return "\n".join(prefix + line for line in head + body) + "\n" + threads + "\n"


ZERO3 = [
    "all_gather_coalesced (deepspeed/runtime/zero/partition_parameters.py:1254)",
    "wrapped_fn (deepspeed/utils/nvtx.py:18)",
    "fetch_sub_module (deepspeed/runtime/zero/partitioned_param_coordinator.py:386)",
    "_call_impl (torch/nn/modules/module.py:1747)",
    "forward (model/moe.py:212)",
    "train_step (train.py:140)",
    "<module> (train.py:301)",
]
PIN = 'Thread 8811 (idle): "Thread-2 (_pin_memory_loop)"\n    _pin_memory_loop (torch/utils/data/_utils/pin_memory.py:55)\n    run (threading.py:982)\n'


def test_a_hung_zero3_job_is_a_collective_hang_not_a_missing_thread():
    # GIVEN every rank in the same ZeRO-3 all-gather; rank 0 alone shows a pin-memory thread
    paste = dump(8810, ZERO3, PIN) + dump(8820, ZERO3) + dump(8830, ZERO3) + dump(8840, ZERO3)
    found = explain_text(paste, "zero3.txt")
    # THEN the verdict is dump's: every rank waits in one collective, and no thread is "lost"
    assert [(f.kind, f.recipe) for f in found] == [("stacks", "collective-hang")]
    assert "all_gather_coalesced" in found[0].summary
    assert found[0].ranks == (0, 1, 2, 3)


WAITS_FOR_DATA = [
    "wait (threading.py:324)",
    "get (multiprocessing/queues.py:113)",
    "_try_get_data (torch/utils/data/dataloader.py:1133)",
    "_get_data (torch/utils/data/dataloader.py:1295)",
    "_next_data (torch/utils/data/dataloader.py:1329)",
    "__next__ (torch/utils/data/dataloader.py:631)",
    "train_epoch (train.py:118)",
    "<module> (train.py:301)",
]
ALL_REDUCE = [
    "all_reduce (torch/distributed/distributed_c10d.py:2050)",
    "wrapper (torch/distributed/c10d_logger.py:83)",
    "reduce_metrics (train.py:96)",
    "train_epoch (train.py:131)",
    "<module> (train.py:301)",
]
WORKER = [
    "read (zipfile.py:940)",
    "__getitem__ (data/shards.py:41)",
    "fetch (torch/utils/data/_utils/fetch.py:52)",
    "_worker_loop (torch/utils/data/_utils/worker.py:309)",
    "run (multiprocessing/process.py:108)",
    "_bootstrap (multiprocessing/process.py:314)",
]


def test_a_rank_held_up_by_its_dataloader_worker_is_named_with_the_workers_line():
    # GIVEN ranks 0, 1 and 3 in all_reduce; rank 2 waits for a batch, and its DataLoader
    # worker process (printed after it by `py-spy dump --subprocesses`) reads a shard
    paste = "".join(
        [
            dump(9301, ALL_REDUCE, prefix="[rank0]:"),
            dump(9302, ALL_REDUCE, prefix="[rank1]:"),
            dump(9303, WAITS_FOR_DATA, prefix="[rank2]:"),
            dump(9350, WORKER, prefix="[rank2]:"),
            dump(9304, ALL_REDUCE, prefix="[rank3]:"),
        ]
    )
    found = explain_text(paste, "dl.txt")
    top = found[0]
    # THEN rank 2 is the one the others wait for, at its worker's line, and the worker is
    # not taken for a fifth rank
    assert (top.kind, top.recipe, top.ranks) == ("stacks", "rank-outside-collective", (2,))
    assert "worker (pid 9350)" in top.summary and "data/shards.py:41" in top.summary
    assert all(4 not in f.ranks for f in found)


def test_dumps_of_a_working_job_say_nothing_wrong():
    compute = ["matmul (model.py:55)", "forward (model.py:80)", "train_step (train.py:88)"]
    paste = dump(6601, compute).replace("(idle)", "(active)") + dump(6602, compute[1:])
    assert all(f.severity == "info" for f in explain_text(paste, "ok.txt"))
