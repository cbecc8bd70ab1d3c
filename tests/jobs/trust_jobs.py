"""Two real gloo jobs for the tests of a watchdog that does no harm and of leaks caught early
(tests/test_watchdog_live.py, tests/test_memory_live.py) and for benchmarks/bench_memory_growth.py.

    python trust_jobs.py evaluate     AdamW, a leak on rank 0, two long evaluations, then a hang
    python trust_jobs.py bare         no optimizer (a hand-written update), a leak on rank 1,
                                      then a hang
    python trust_jobs.py healthy      a healthy job with all the habits of real ones, for the
                                      false-alarm budget: DataLoader workers, AdamW, a 1.5 s
                                      checkpoint pause on rank 0 every 25 steps, a 12 s
                                      evaluation every 60 s, GC pauses, step-time jitter,
                                      warm-up allocation, the allocator growing and trimming

Phases go by the clock (the machine may be loaded), and every rank starts a phase at the
same collective. The leak is the classic one: each step's error kept as a tensor, with its
graph: about 150 KB a step (a 64x600 float32 difference saved for abs's backward).
Environment: LEAK_BYTES sets the leak per step (default 153,600); TRAIN_S the first
training phase (default 30 s); where FIRST_PHASE_UNTIL names a file, the first phase ends as
soon as it exists (at most TRAIN_S): a test ends it once it has seen what it waits for, however
slow a loaded machine makes the steps; EVAL_EVERY the healthy job's seconds between evaluations
(default 60); the others are fixed.
"""

from __future__ import annotations

import os
import sys
import time

import torch
import torch.distributed as dist

LEAK_BYTES = int(os.environ.get("LEAK_BYTES", str(64 * 600 * 4)))
TRAIN_S = float(os.environ.get("TRAIN_S", "30"))
EVAL_S = 13.0  # longer than --hang-timeout 10: the watchdog looks in the middle of it
BETWEEN_S = 6.0
WIDTH = 600


def average(model: torch.nn.Module) -> None:
    for param in model.parameters():
        if param.grad is not None:
            dist.all_reduce(param.grad)
            param.grad /= dist.get_world_size()


def train(model, optimizer, until: float, leaky: bool, kept: list, stop_file: str = "") -> int:
    """Steps until `until` or until the file `stop_file` exists (the ranks agree on when to stop:
    rank 0 decides)."""
    rows = max(1, LEAK_BYTES // (WIDTH * 4))
    steps = 0
    while True:
        data, target = torch.randn(rows, 256), torch.randn(rows, WIDTH)
        out = model(data)
        loss = (out - target).pow(2).mean()
        if optimizer is not None:
            optimizer.zero_grad()
        else:
            model.zero_grad()
        loss.backward()
        average(model)
        if optimizer is not None:
            optimizer.step()
        else:
            with torch.no_grad():  # the hand-written update: no step to count
                for param in model.parameters():
                    param -= 0.001 * param.grad
        error = (out - target).abs().mean()
        kept.append(error if leaky else error.item())  # LEAK: should be .item()
        steps += 1
        time.sleep(0.03)
        over = time.monotonic() >= until or (stop_file != "" and os.path.exists(stop_file))
        flag = torch.tensor([1 if over else 0])
        dist.broadcast(flag, 0)
        if flag.item():
            return steps


def evaluate(seconds: float) -> None:
    """No collective for `seconds`: every rank computes, a batch at a time, and between
    batches waits a moment, as a host does for its device. A batch is a few ms of matmuls
    and the wait 20 ms: about a seventh of a core a rank, well above what reads as a
    computing rank (analysis/states.py), and the CPU left to the other tests' jobs."""
    end = time.monotonic() + seconds
    weight = torch.randn(256, 256)
    with torch.no_grad():
        while time.monotonic() < end:
            x = torch.randn(256, 256)
            for _ in range(5):
                x = torch.tanh(x @ weight)
            time.sleep(0.02)


def wait_for_checkpoint() -> None:
    while True:
        time.sleep(0.2)  # WAIT


def phase(model, optimizer, seconds, leaky, kept, stop_file: str = "") -> None:
    train(model, optimizer, time.monotonic() + seconds, leaky, kept, stop_file)


def healthy(rank: int, seconds: float) -> None:
    import gc
    import random

    from torch.utils.data import DataLoader, TensorDataset

    model = torch.nn.Linear(256, WIDTH)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = TensorDataset(torch.randn(4096, 256), torch.randn(4096, WIDTH))
    loader = DataLoader(data, batch_size=64, num_workers=2, persistent_workers=True)
    warm = [torch.randn(1 << 20) for _ in range(48)]  # warm-up: ~200 MB made at the start
    print("READY", flush=True)
    end = time.monotonic() + seconds
    every = float(os.environ.get("EVAL_EVERY", "60"))
    next_eval = time.monotonic() + every
    step = 0
    while True:
        for x, y in loader:
            loss = (model(x) - y).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            average(model)
            optimizer.step()
            step += 1
            if step == 20:
                del warm[:]  # the warm-up's memory handed back
            # Each pause on steps of its own: the checkpoint (every 25th) stays the short
            # pause it is, where on a loaded node the three together took over 5 s.
            if step % 20 == 7:  # the allocator grows by 64 MB and trims again
                block = torch.ones(16 << 20)
                del block
            if step % 10 == 3:
                garbage = [[i] for i in range(200_000)]
                del garbage
                gc.collect()  # a GC pause
            time.sleep(random.uniform(0.0, 0.08))  # step-time jitter
            if step % 25 == 0:
                if rank == 0:
                    time.sleep(1.5)  # saving a checkpoint, the others wait in barrier
                dist.barrier()
            flag = torch.tensor([0, 0])
            if rank == 0:
                now = time.monotonic()
                flag = torch.tensor([int(now >= next_eval), int(now >= end)])
            dist.broadcast(flag, 0)
            if flag[1].item():
                print("DONE", flush=True)
                return
            if flag[0].item():
                evaluate(12.0)
                every = float(os.environ.get("EVAL_EVERY", "60"))
    next_eval = time.monotonic() + every


def main() -> None:
    kind = sys.argv[1]
    dist.init_process_group("gloo")
    if kind == "healthy":
        healthy(dist.get_rank(), float(sys.argv[2]) if len(sys.argv) > 2 else 180.0)
        dist.destroy_process_group()
        return
    rank = dist.get_rank()
    torch.manual_seed(rank)
    model = torch.nn.Linear(256, WIDTH)
    kept: list = []
    if kind == "evaluate":
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        leaky = rank == 0
        print("READY", flush=True)
        phase(model, optimizer, TRAIN_S, leaky, kept, os.environ.get("FIRST_PHASE_UNTIL", ""))
        evaluate(EVAL_S)
        print("EVAL 1 DONE", flush=True)
        phase(model, optimizer, BETWEEN_S, leaky, kept)
        evaluate(EVAL_S)
        print("EVAL 2 DONE", flush=True)
        phase(model, optimizer, BETWEEN_S, leaky, kept)
        tensor = torch.ones(4)
        if rank != 1:
            dist.all_reduce(tensor)  # ALL_REDUCE: rank 1 never comes
        wait_for_checkpoint()
    elif kind == "bare":
        leaky = rank == 1
        print("READY", flush=True)
        phase(model, None, TRAIN_S, leaky, kept, os.environ.get("FIRST_PHASE_UNTIL", ""))
        print("HANGING", flush=True)
        tensor = torch.ones(4)
        if rank != 0:
            dist.all_reduce(tensor)  # rank 0 never comes
        wait_for_checkpoint()


if __name__ == "__main__":
    main()
