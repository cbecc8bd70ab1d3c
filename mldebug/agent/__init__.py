"""The in-rank side of mldebug, started by the hook in every process of a job.

Only the first process of a process tree that carries rank environment becomes the rank's
agent; DataLoader workers and other subprocesses inherit a marker and leave things alone.
The agent:
  * writes ranks/<rank>/proc.json (who and where this rank is: `dump` finds pids by it);
  * in wrap mode, points fds 1 and 2 at the rank's log files (native mode: the launcher
    already opened them as the rank's stdout and stderr);
  * makes sys.stdout line-buffered so output shows up as it is printed;
  * enables faulthandler into ranks/<rank>/faulthandler.log, so a segfault leaves stacks;
  * installs an excepthook that writes ranks/<rank>/error.json, then calls the previous one;
  * writes ranks/<rank>/exit.json when Python shuts down normally (not after a signal).

Stdlib only; it talks to the world through files in the run directory. This module is
loaded by path (as `_mldebug_agent`), so siblings are imported relatively or by path too.
"""

from __future__ import annotations

import atexit
import os
import sys
import time
from pathlib import Path

from .errors import install_excepthook
from .identity import ENV_OWNER, claim_rank, is_launcher, rank_identity

ENV_RUN_DIR = "MLDEBUG_RUN_DIR"
ENV_MODE = "MLDEBUG_MODE"
MODE_WRAP = "wrap"

_fault_file = None  # stays open for faulthandler for the life of the process


def _rundir_module():
    """mldebug/rundir.py, loaded by path next to this package (stdlib only)."""
    import importlib.util

    cached = sys.modules.get("_mldebug_rundir")
    if cached is not None:
        return cached
    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "rundir.py")
    spec = importlib.util.spec_from_file_location("_mldebug_rundir", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["_mldebug_rundir"] = module
    spec.loader.exec_module(module)
    return module


def _redirect_to_files(rundir, stdout_path, stderr_path) -> None:
    for stream, fd, path in ((sys.stdout, 1, stdout_path), (sys.stderr, 2, stderr_path)):
        if stream is not None:
            stream.flush()
        target = rundir.open_append(path)
        try:
            os.dup2(target, fd)
        finally:
            os.close(target)


def _line_buffer_stdout() -> None:
    reconfigure = getattr(sys.stdout, "reconfigure", None)
    if reconfigure is not None:
        reconfigure(line_buffering=True)


def activate() -> None:
    global _fault_file
    run_dir = os.environ.get(ENV_RUN_DIR)
    identity = rank_identity(os.environ)
    if not run_dir or identity is None or is_launcher(getattr(sys, "orig_argv", sys.argv)):
        return  # a launcher or a helper process: nothing of a rank to watch
    rank, local_rank, world_size = identity
    if not claim_rank(os.environ, rank, os.getpid()):
        return  # a DataLoader worker or subprocess of a rank that already has its agent
    rundir = _rundir_module()
    paths = rundir.RunPaths(Path(run_dir))
    rundir.make_private_dir(paths.rank_dir(rank))
    host = rundir.hostname()
    # proc.json first: the launcher only tails a wrapped rank's files once it knows who it is.
    rundir.write_json_atomic(
        paths.proc_info(rank),
        {
            "rank": rank,
            "local_rank": local_rank,
            "world_size": world_size,
            "host": host,
            "pid": os.getpid(),
            "start_time": time.time(),
            "start_ticks": rundir.proc_start_ticks(),
            "owner": os.environ[ENV_OWNER],
        },
    )
    if os.environ.get(ENV_MODE) == MODE_WRAP:
        _redirect_to_files(rundir, paths.stdout(rank), paths.stderr(rank))
    _line_buffer_stdout()
    import faulthandler

    fault_fd = rundir.open_append(paths.fault_log(rank))
    _fault_file = os.fdopen(fault_fd, "a", encoding="utf-8")
    faulthandler.enable(file=_fault_file, all_threads=True)
    install_excepthook(paths.error_file(rank), rank, host, rundir.write_json_atomic)
    atexit.register(_note_normal_exit, paths.exit_file(rank), rundir.write_json_atomic, os.getpid())


def _note_normal_exit(path, write_json, pid: int) -> None:
    """Python shuts down normally; a rank that dies of a signal never gets here."""
    if os.getpid() != pid:
        return  # a process forked from the rank (it inherits atexit) is not the rank
    try:
        write_json(path, {"pid": pid, "time": time.time()})
    except Exception:
        pass
