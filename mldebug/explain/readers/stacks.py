"""`py-spy dump` text pasted from other machines, merged as `mldebug dump` merges stacks:

    Process 4242: python train.py
    Python v3.11.7 (/usr/bin/python3.11)

    Thread 4242 (idle): "MainThread"
        all_reduce (torch/distributed/distributed_c10d.py:2050)
        train_step (train.py:88)

Each process's main thread is one stack; stacks are grouped (`analysis.merge`) and the
processes outside the collective the others wait in are named. A process's rank is the
launcher prefix of its lines when there is one, else its order in the paste.
"""

from __future__ import annotations

import re

from mldebug.analysis.frames import collective_op, user_frame
from mldebug.analysis.merge import group_stacks
from mldebug.explain.finding import KIND_STACKS, Explained
from mldebug.explain.text import Line
from mldebug.model import SEVERITY_WARNING, Frame
from mldebug.ranges import format_ranks

_PROCESS = re.compile(r"^Process (?P<pid>\d+): ?(?P<cmd>.*)")
_THREAD = re.compile(r'^Thread (?P<tid>\w+) \((?P<state>[\w+]+)\): "(?P<name>[^"]*)"')
_FRAME = re.compile(r"^\s*(?P<func>[^\s(][^(]*?) \((?P<file>[^():]+)(?::(?P<line>\d+))?\)\s*$")
MAX_PROCS = 4096
MAX_FRAMES = 256


def _parse(
    lines: list[Line], used: list[Line] | None = None
) -> list[tuple[str, int | None, list[Frame], Line]]:
    """(pid, prefix rank, main-thread frames outermost first, the Process line) of each dump."""
    out: list[tuple[str, int | None, list[Frame], Line]] = []
    pid = None
    rank = None
    head: Line | None = None
    frames: list[Frame] = []
    in_main = False

    def close() -> None:
        if pid is not None and frames and head is not None and len(out) < MAX_PROCS:
            out.append((pid, rank, list(reversed(frames)), head))

    for line in lines:
        text = line.text
        process = _PROCESS.match(text)
        if process:
            close()
            pid, rank, head, frames, in_main = process.group("pid"), line.rank, line, [], False
            if used is not None:
                used.append(line)
            continue
        thread = _THREAD.match(text.strip())
        if thread and pid is not None:
            in_main = thread.group("name") == "MainThread" and not frames
            if used is not None and in_main:
                used.append(line)
            continue
        if in_main and len(frames) < MAX_FRAMES:
            frame = _FRAME.match(text)
            if frame:
                if used is not None:
                    used.append(line)
                number = frame.group("line")
                frames.append(
                    Frame(
                        frame.group("func").strip(),
                        frame.group("file"),
                        int(number) if number else None,
                    )
                )
    close()
    return out


def read(lines: list[Line]) -> list[Explained]:
    if not any(line.text.startswith("Process ") for line in lines):
        return []
    used: list[Line] = []
    dumps = _parse(lines, used)
    if len(dumps) < 2:
        return []
    ranks: dict[int, tuple[str, Line]] = {}
    stacks = {}
    for order, (pid, rank, frames, head) in enumerate(dumps):
        key = rank if rank is not None and rank not in stacks else order
        stacks[key] = frames
        ranks[key] = (pid, head)
    groups = group_stacks(stacks)
    if len(groups) == 1:
        group = groups[0]
        if group.collective is None:
            return []
        where = group.user_frame.location if group.user_frame else "?"
        return [
            Explained(
                KIND_STACKS,
                f"every process of the dumps ({len(stacks)}) waits in {group.collective} at "
                f"{where}: none is elsewhere, so the collective itself does not complete "
                "(network, a GPU, or a rank that is not in these dumps)",
                0.6,
                "collective-hang",
                fix="check that these are all the ranks of the job; then NCCL_DEBUG=INFO and the "
                "Flight Recorder",
                ranks=tuple(sorted(stacks)),
                location=where if group.user_frame else None,
                severity=SEVERITY_WARNING,
            ).cited(used)
        ]
    waiting = [g for g in groups if g.collective is not None]
    if not waiting:
        return []
    main = max(waiting, key=lambda g: len(g.ranks))
    others = [g for g in groups if g.collective is None]
    if not others:
        return []
    odd = sorted(r for g in others for r in g.ranks)
    place = others[0].user_frame or (
        Frame(others[0].frames[-1].function, others[0].frames[-1].file, others[0].frames[-1].line)
        if others[0].frames
        else None
    )
    where = f"{place.function} at {place.location}" if place else "other code"
    pids = ", ".join(ranks[r][0] for r in odd[:6])
    wait_at = user_frame(main.frames)
    return [
        Explained(
            KIND_STACKS,
            f"{'process' if len(odd) == 1 else 'processes'} {format_ranks(odd)} (pid {pids}) "
            f"{'is' if len(odd) == 1 else 'are'} in {where} while {len(main.ranks)} others wait "
            f"in {collective_op(main.frames)}"
            + (f" at {wait_at.location}" if wait_at else "")
            + ": the others wait for it",
            0.82,
            "rank-outside-collective",
            fix="see why that process is still in that code (a slow or stuck data load, I/O, a "
            "rank-only branch); its stack is the place to start",
            ranks=tuple(odd),
            location=place.location if place else None,
            note="numbers are the dumps' order in the paste unless a launcher prefix named "
            "the rank",
        ).cited(
            [ranks[r][1] for r in odd]
            + [line for line in used if line not in {ranks[r][1] for r in odd}]
        )
    ]
