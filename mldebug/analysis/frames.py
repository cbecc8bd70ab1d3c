"""What a frame is: the user's own code, a library, or a torch.distributed operation.

The user's code is what is left after the standard library, installed packages
(site-packages, dist-packages), torch itself and native frames. The operation a rank is in
is the outermost public torch.distributed call on its stack: `all_gather_object` calls
`all_gather`, and the user wrote the former. torch >= 2.2 wraps each op in a c10d_logger
`wrapper` frame, and py-spy 0.4 qualifies names (`Thread.run`,
`_exception_logger.<locals>.wrapper`), so names are compared by their last part.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from operator import attrgetter

from mldebug.model import STATE_RUNNING, Frame, RankView
from mldebug.rankrules import COLLECTIVE_CALLS, POINT_TO_POINT_CALLS, is_library_path

COLLECTIVE_OPS = frozenset(
    {
        *COLLECTIVE_CALLS,
        *POINT_TO_POINT_CALLS,
        "_all_gather_base",
        "_reduce_scatter_base",
        "init_process_group",
        "new_group",
        "new_subgroups",
        "destroy_process_group",
    }
)
RENDEZVOUS_OPS = frozenset(
    {"init_process_group", "new_group", "new_subgroups", "rendezvous", "store"}
)

_C10D_FILES = ("torch/distributed/distributed_c10d.py",)
# DeepSpeed's ZeRO gathers and reduce-scatters wait in these functions of its own (a py-spy
# dump of a hung ZeRO-3 job often ends there, in a handle's wait, without a c10d frame).
_ZERO_FILES = (
    "deepspeed/runtime/zero/partition_parameters.py",
    "deepspeed/runtime/comm/coalesced_collectives.py",
)
_ZERO_OPS = frozenset({"all_gather_coalesced", "_all_gather_dtype", "reduce_scatter_coalesced"})
_RENDEZVOUS_FILES = ("torch/distributed/rendezvous.py", "torch/distributed/elastic/rendezvous/")


_FRAME_KEY = attrgetter("function", "file", "line")


def stack_key(frames: Sequence[Frame]) -> tuple[tuple[str, str, int | None], ...]:
    """A hashable key for a stack, cheap to build (C-level attribute access)."""
    return tuple(map(_FRAME_KEY, frames))


@lru_cache(maxsize=65536)
def _file_role(path: str) -> str | None:
    if path.endswith(_C10D_FILES):
        return "c10d"
    if path.endswith(_ZERO_FILES):
        return "zero"
    if any(part in path for part in _RENDEZVOUS_FILES):
        return "rendezvous"
    return None


def short_name(function: str) -> str:
    """`Thread.run` -> `run`; `_exception_logger.<locals>.wrapper` -> `wrapper`."""
    return function.rsplit(".", 1)[-1]


# Cached: a 1,024-rank job names the same few hundred files again and again.
is_library_file = lru_cache(maxsize=65536)(is_library_path)


def is_user_frame(frame: Frame) -> bool:
    return not frame.native and not is_library_file(frame.file)


def user_frame(frames: Sequence[Frame]) -> Frame | None:
    """The innermost frame of the user's own code (frames are outermost first)."""
    for frame in reversed(frames):
        if is_user_frame(frame):
            return frame
    return None


_IMPORT_FILE = "<frozen importlib._bootstrap>"


def importing(frames: Sequence[Frame]) -> str | None:
    """The module the stack is importing (the outermost one: what its code asked for), as
    a dotted name, or None when it imports nothing. A rank that loads a module (torch._dynamo
    the first time an optimizer is built, a model's package) works; it can take a minute on
    a loaded node, its bytecode compiled anew."""
    loading = False
    for frame in frames:
        if frame.file == _IMPORT_FILE and short_name(frame.function) == "_find_and_load":
            loading = True
        elif loading and frame.function == "<module>":
            return module_name(frame.file)
    return None


# What the verdicts say a rank in that state does.
STARTING_PYTHON = "still starting Python (site: .pth files, sitecustomize)"


def _is_site(path: str) -> bool:
    """Python's `site` module, which runs the .pth files' lines and sitecustomize before the
    program's first line: frozen from 3.11 on, a file of the standard library before."""
    return path == "<frozen site>" or (path.endswith("/site.py") and is_library_path(path))


def starting_python(frames: Sequence[Frame]) -> bool:
    """The stack of a process whose Python is still starting: the outermost module, under
    the import machinery's frames, is `site` (a .pth file's line, a sitecustomize). Its
    program has not begun; a slow disk or a loaded node can hold it there a while."""
    imported = False
    for frame in frames:
        if frame.native:
            continue
        if frame.file.startswith("<frozen importlib."):
            imported = True
            continue
        return imported and frame.function == "<module>" and _is_site(frame.file)
    return False


def busy_importing(view: RankView) -> str | None:
    """The module a running rank's main thread is loading (importing), else None (its
    Python still starting imports `site`: that is no module of its program)."""
    if view.state != STATE_RUNNING or not view.threads:
        return None
    frames = view.threads[0].frames
    return None if starting_python(frames) else importing(frames)


def busy_starting_python(view: RankView) -> bool:
    """A running rank whose Python is still starting (starting_python)."""
    return (
        view.state == STATE_RUNNING
        and bool(view.threads)
        and starting_python(view.threads[0].frames)
    )


def module_name(path: str) -> str:
    """torch._dynamo for .../site-packages/torch/_dynamo/__init__.py; a file's own name
    outside installed packages."""
    for marker in ("site-packages/", "dist-packages/"):
        if marker in path:
            dotted = path.rsplit(marker, 1)[1].removesuffix(".py").removesuffix("/__init__")
            return dotted.replace("/", ".")
    return path.rsplit("/", 1)[-1].removesuffix(".py")


def collective_op(frames: Sequence[Frame]) -> str | None:
    """The torch.distributed operation the stack is in, outermost one, or None."""
    for frame in frames:
        if frame.native:
            continue
        role = _file_role(frame.file)
        if role == "c10d":
            name = short_name(frame.function)
            if name in COLLECTIVE_OPS:
                return name
        elif role == "rendezvous":
            return "rendezvous"
        elif role == "zero" and short_name(frame.function) in _ZERO_OPS:
            return short_name(frame.function)
    return None


def is_rendezvous(op: str | None) -> bool:
    return op in RENDEZVOUS_OPS


# A rank's main thread that waits for a batch from DataLoader worker processes sits in these
# methods of the multi-process iterator; a worker runs `_worker_loop`, which calls the dataset.
_DATALOADER_FILE = "torch/utils/data/dataloader.py"
_DATALOADER_WAITS = frozenset({"_try_get_data", "_get_data", "_next_data"})
_WORKER_FILE = "torch/utils/data/_utils/worker.py"


def waits_for_dataloader(frames: Sequence[Frame]) -> bool:
    """True when the stack waits in the DataLoader for a batch that worker processes make.

    With num_workers=0 the dataset runs on this very stack, below the DataLoader frames: its
    own line is already the innermost user frame, so that is not a wait for workers.
    """
    for index in range(len(frames) - 1, -1, -1):
        frame = frames[index]
        if frame.native:
            continue
        if (
            frame.file.endswith(_DATALOADER_FILE)
            and short_name(frame.function) in _DATALOADER_WAITS
        ):
            return True
        if is_user_frame(frame):
            return False
    return False


def _worker_loop_index(frames: Sequence[Frame]) -> int | None:
    for index in range(len(frames) - 1, -1, -1):
        frame = frames[index]
        if (
            not frame.native
            and frame.file.endswith(_WORKER_FILE)
            and short_name(frame.function) == "_worker_loop"
        ):
            return index
    return None


def is_dataloader_worker(frames: Sequence[Frame]) -> bool:
    """True for the main thread of a DataLoader worker process (it runs `_worker_loop`)."""
    return _worker_loop_index(frames) is not None


def worker_user_frame(frames: Sequence[Frame]) -> Frame | None:
    """The innermost user frame a DataLoader worker is in (the dataset's `__getitem__`, a
    collate_fn, a worker_init_fn), or None while it waits for work in `_worker_loop`.

    Frames above `_worker_loop` are not counted: a forked worker still carries its parent's
    stack up to the `for batch in loader` line that started it.
    """
    start = _worker_loop_index(frames)
    return None if start is None else user_frame(frames[start + 1 :])
