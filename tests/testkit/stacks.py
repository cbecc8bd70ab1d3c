"""Stack samples built by hand with the model, turned into snapshots by the real analysis
(build_snapshot): a rank in a collective (`in_op`), at a line of the user's (`at`), read
three times on the same frames (`still`).
"""

from __future__ import annotations

from mldebug.analysis.snapshot import build_snapshot
from mldebug.model import Frame, RankTarget, StackSample, ThreadStack

C10D = "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"
TRAIN = "/home/me/proj/train.py"
MODULE = Frame("<module>", TRAIN, 200)
MAIN = Frame("main", TRAIN, 180)


def in_op(op: str, caller: str, line: int) -> tuple[Frame, ...]:
    return (MODULE, MAIN, Frame(caller, TRAIN, line), Frame(op, C10D, 3000))


def at(function: str, line: int) -> tuple[Frame, ...]:
    return (MODULE, MAIN, Frame(function, TRAIN, line))


def samples(rank: int, *stacks, main_cpu=(0.0, 0.0, 0.0), failure=None, world=None):
    target = RankTarget(pid=1000 + rank, rank=rank, world_size=world)
    out = []
    for index, frames in enumerate(stacks):
        threads = (ThreadStack(1, "MainThread", frames),) if frames else ()
        out.append(
            StackSample(
                target,
                100.0 + 0.4 * index,
                threads,
                failure=None if frames else failure,
                failure_detail="ptrace refused: EPERM" if not frames else "",
                cpu_seconds=main_cpu[index],
                main_cpu_seconds=main_cpu[index],
            )
        )
    return target, out


def snapshot(per_rank: dict, world=None, exit_codes=None, shut_down=frozenset()):
    targets, by_pid = [], {}
    for rank, (stacks, kwargs) in per_rank.items():
        target, rank_samples = samples(rank, *stacks, world=world, **kwargs)
        targets.append(target)
        by_pid[target.pid] = rank_samples
    return build_snapshot(
        targets, by_pid, world_size=world, exit_codes=exit_codes, shut_down=shut_down
    )


def still(frames, **kwargs):
    return ((frames, frames, frames), kwargs)
