"""Whether this process is a launcher, and whether it is its rank's first process. Pure.

(Which rank a process is: mldebug/rankrules.py, shared with the outside.)
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping, Sequence

# Set by the first process of a rank for its whole process tree: "<rank>:<pid>".
ENV_OWNER = "MLDEBUG_RANK_OWNER"

# Launchers are never ranks, even when their own environment has a rank variable
# (`srun torchrun ...` gives torchrun SLURM_PROCID): script names and `python -m` modules.
LAUNCHERS = frozenset(
    {
        "torchrun",
        "torch.distributed.run",
        "torch.distributed.launch",
        "accelerate",
        "accelerate.commands.launch",
        "accelerate.commands.accelerate_cli",
        "deepspeed",
        "deepspeed.launcher.runner",
        "deepspeed.launcher.launch",
    }
)


def is_launcher(argv: Sequence[str]) -> bool:
    """Is this Python process a known launcher? `argv` is sys.orig_argv (python included).

    Read as the interpreter reads its options: up to `-m MODULE`, `-c CODE` or the script,
    skipping the values of -W and -X (`python -W ignore torchrun ...`).
    """
    args = iter(argv[1:])
    for arg in args:
        if arg == "--check-hash-based-pycs":
            next(args, None)
        elif arg.startswith("--"):
            continue
        elif arg.startswith("-") and arg != "-":
            for position, flag in enumerate(arg[1:], start=2):
                if flag in "cmWX":  # the value is the rest of this argument, or the next one
                    value = arg[position:] or next(args, "")
                    if flag in "cm":
                        return flag == "m" and value in LAUNCHERS
                    break
        else:
            return os.path.basename(arg).removesuffix(".py") in LAUNCHERS
    return False


def claim_rank(env: MutableMapping[str, str], rank: int, pid: int) -> bool:
    """True for the first process of this rank's tree; marks the tree so children see it.

    A child of the rank (DataLoader worker, subprocess) inherits the marker with the same
    rank and another pid, and must not redirect output or write the rank's files again.
    """
    owner = env.get(ENV_OWNER, "")
    owner_rank, _, owner_pid = owner.partition(":")
    if owner_rank == str(rank) and owner_pid != str(pid):
        return False
    env[ENV_OWNER] = f"{rank}:{pid}"
    return True
