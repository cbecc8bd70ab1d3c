"""`py-spy dump` text pasted from other machines, judged as `mldebug dump` judges stacks:

    Process 4242: python train.py
    Python v3.11.7 (/usr/bin/python3.11)

    Thread 4242 (idle): "MainThread"
        all_reduce (torch/distributed/distributed_c10d.py:2050)
        train_step (train.py:88)

Each process becomes one rank's view (its threads, main thread first; the DataLoader
worker processes `py-spy dump --subprocesses` prints after it, as dump's own reading shows
them) and the views go
through `analysis.find_problems`, the cross-rank verdict of `dump`: who waits in which
collective, who is elsewhere, whose DataLoader holds it up, ranks in different collectives.
A process's rank is the launcher prefix of its lines when there is one, else its order in
the paste. A paste holds one sample per rank: the verdict is a warning unless the dump's
own rules make it more, and the threads a paste left out say nothing (no missing-thread).

py-spy prints a file relative to the `sys.path` entry it came from (`threading.py`,
`torch/distributed/distributed_c10d.py`): such a path whose top module is the standard
library's or a well-known package's is put back under an install prefix, so the analysis
tells library frames from the user's own.
"""

from __future__ import annotations

import re
import sys
from dataclasses import replace

from mldebug.analysis.findings import find_problems
from mldebug.analysis.frames import is_dataloader_worker
from mldebug.analysis.snapshot import assign_ranks, rank_view
from mldebug.explain.finding import KIND_STACKS, Explained
from mldebug.explain.text import Line
from mldebug.model import (
    KIND_HANG,
    KIND_MISMATCH,
    KIND_OUTLIER,
    KIND_RENDEZVOUS,
    KIND_STUCK,
    Frame,
    RankTarget,
    StackSample,
    ThreadStack,
)

_PROCESS = re.compile(r"^Process (?P<pid>\d{1,10}): ?(?P<cmd>.*)")
_THREAD = re.compile(
    r'^Thread (?P<tid>0x[0-9A-Fa-f]+|\d+) \((?P<state>[\w+ ]+)\)(?:: "(?P<name>[^"]*)")?'
)
_FRAME = re.compile(r"^\s*(?P<func>[^\s(][^(]*?) \((?P<file>[^():]+)(?::(?P<line>\d+))?\)\s*$")
MAX_PROCS = 4096
MAX_THREADS = 256
MAX_FRAMES = 256
# How sure each verdict of the dump's analysis is when read from a paste (one sample).
SURE = {
    KIND_OUTLIER: 0.82,
    KIND_MISMATCH: 0.8,
    KIND_HANG: 0.6,
    KIND_RENDEZVOUS: 0.6,
    KIND_STUCK: 0.5,
}
LIBRARIES = frozenset(sys.stdlib_module_names) | {
    "torch",
    "deepspeed",
    "transformers",
    "accelerate",
    "lightning",
    "pytorch_lightning",
    "megatron",
    "apex",
    "fairseq",
    "datasets",
    "numpy",
    "triton",
    "torchtitan",
    "peft",
    "trl",
    "tqdm",
}
_SITE = "/site-packages/"
_STDLIB = f"/usr/lib/python{sys.version_info.major}.{sys.version_info.minor}/"


def _full(path: str) -> str:
    """A py-spy short path as the analysis reads it (see the module's docstring)."""
    if path.startswith(("/", ".", "<")):
        return path
    top = path.split("/", 1)[0].removesuffix(".py")
    if top in sys.stdlib_module_names:
        return _STDLIB + path
    return _SITE + path if top in LIBRARIES else path


class _Proc:
    def __init__(self, pid: int, rank: int | None, head: Line) -> None:
        self.pid, self.rank, self.head = pid, rank, head
        self.threads: list[tuple[str, bool, list[Frame]]] = []
        self.lines: list[Line] = [head]
        self.workers: list[_Proc] = []  # its DataLoader worker processes (py-spy --subprocesses)

    def main_frames(self) -> list[Frame]:
        main = next((t for t in self.threads if t[0] == "MainThread"), self.threads[0])
        return list(reversed(main[2]))  # outermost first


def _with_workers(procs: list[_Proc]) -> list[_Proc]:
    """The ranks' processes; a DataLoader worker's (`py-spy dump --subprocesses` prints it
    after its parent) joins the process before it, as the rank's worker."""
    ranks: list[_Proc] = []
    for proc in procs:
        if ranks and is_dataloader_worker(proc.main_frames()):
            ranks[-1].workers.append(proc)
            ranks[-1].lines += proc.lines
        else:
            ranks.append(proc)
    return ranks


def _parse(lines: list[Line]) -> list[_Proc]:
    procs: list[_Proc] = []
    proc: _Proc | None = None
    for line in lines:
        text = line.text
        process = _PROCESS.match(text)
        if process:
            if len(procs) >= MAX_PROCS:
                break
            proc = _Proc(int(process.group("pid")), line.rank, line)
            procs.append(proc)
            continue
        if proc is None:
            continue
        thread = _THREAD.match(text.strip())
        if thread:
            if len(proc.threads) < MAX_THREADS:
                state = thread.group("state")
                proc.threads.append((thread.group("name") or "", "active" in state, []))
                proc.lines.append(line)
            continue
        frame = _FRAME.match(text)
        if frame and proc.threads and len(proc.threads[-1][2]) < MAX_FRAMES:
            number = frame.group("line")
            proc.threads[-1][2].append(
                Frame(
                    frame.group("func").strip(),
                    _full(frame.group("file")),
                    int(number) if number else None,
                )
            )
            proc.lines.append(line)
    return [p for p in procs if p.threads]


def _sample(proc: _Proc, target: RankTarget) -> StackSample:
    ordered = sorted(proc.threads, key=lambda t: t[0] != "MainThread")  # the main one first
    threads = [
        ThreadStack(index, name, tuple(reversed(frames)), active=active)
        for index, (name, active, frames) in enumerate(ordered)
    ]
    for worker in proc.workers:  # as dump shows them: the worker's main thread, by its pid
        threads.append(
            ThreadStack(
                len(threads), "DataLoader worker", tuple(worker.main_frames()), pid=worker.pid
            )
        )
    return StackSample(target, 0.0, tuple(threads))


def read(lines: list[Line]) -> list[Explained]:
    if not any(line.text.startswith("Process ") for line in lines):
        return []
    procs = _with_workers(_parse(lines))
    if len(procs) < 2:
        return []
    targets = []
    for order, proc in enumerate(procs):
        rank = proc.rank if proc.rank is not None else order
        targets.append(RankTarget(pid=proc.pid, rank=rank))
    by_target = {id(t): p for t, p in zip(targets, procs, strict=True)}
    pairs = assign_ranks(targets)
    memo: dict = {}
    views = [rank_view(rank, t, [_sample(by_target[id(t)], t)], memo) for rank, t in pairs]
    lines_of = {rank: by_target[id(t)].lines for rank, t in pairs}
    found = []
    for finding in find_problems(views):
        sure = SURE.get(finding.kind)
        if sure is None:
            continue
        named = [line for r in finding.ranks for line in lines_of.get(r, [])[:1]]
        found.append(
            Explained.of(
                replace(finding, kind=KIND_STACKS, waiting=(), facts=()),
                sure,
                note="ranks are the dumps' order in the paste unless a launcher prefix named "
                "them; one dump per rank cannot tell a wait from a slow step",
            ).cited(named + [line for ls in lines_of.values() for line in ls])
        )
    return found
