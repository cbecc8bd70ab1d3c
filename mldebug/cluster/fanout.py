"""Run commands that answer in lines (srun, ssh, pdsh), bounded: at most `parallel` at a
time, each killed at its deadline, at most MAX_BYTES of output kept from each.

What a command printed before its deadline is kept: srun that waits on one silent node has
already passed on the other nodes' documents. Nothing here raises for a command that fails;
the result says how it ended.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import IO

from mldebug.collect.waits import wait_futures

MAX_BYTES = 64 << 20  # all the documents one command passes on, at least
MAX_LINE = 16 << 20  # one node document
# What one node's document may take of a command that passes on several (srun, pdsh): 8
# ranks with their agents' state.json (about 50 KiB each) make about 400 KiB.
NODE_BYTES = 2 << 20
STDERR_TAIL = 4096
DEFAULT_PARALLEL = 32
_RUNNING: set[subprocess.Popen] = set()  # what stop_all() ends (the live view quitting)
_LOCK = threading.Lock()


@dataclass(frozen=True)
class Answer:
    key: str  # what the caller named the command by (a host)
    lines: tuple[bytes, ...]
    returncode: int | None  # None: killed at its deadline, or could not start
    stderr: str = ""
    seconds: float = 0.0
    error: str = ""  # why it did not run or did not end: "timed out after 30 s"
    dropped: int = 0  # lines left out once the output passed its cap (max_bytes)


def bytes_for(nodes: int) -> int:
    """The cap on what one command passing on `nodes` nodes' documents may print."""
    return max(MAX_BYTES, nodes * NODE_BYTES)


def _read_lines(
    stream: IO[bytes],
    into: list[bytes],
    max_bytes: int = MAX_BYTES,
    dropped: list[int] | None = None,
    each: Callable[[bytes], None] | None = None,
    raised: list[Exception] | None = None,
) -> None:
    """The command's stdout lines, kept up to `max_bytes` (the lines past it counted in
    `dropped`); or each handed to `each` as it
    comes, nothing kept (a SLURM step of 16,384 nodes passes on more than any cap). What
    `each` raises goes to `raised` for the caller, and the rest is drained unread, so the
    command never blocks on a full pipe."""
    total = 0
    for line in iter(lambda: stream.readline(MAX_LINE), b""):
        if each is not None:
            try:
                each(line)
            except Exception as error:  # the caller's: raised there once the command ended
                if raised is None:
                    raise
                raised.append(error)
                each = _drop  # the rest is drained unread
            continue
        total += len(line)
        if total <= max_bytes:
            into.append(line)
        elif dropped is not None:
            dropped[0] += 1
    stream.close()


def _drop(line: bytes) -> None:
    del line


def _read_tail(stream: IO[bytes], into: list[bytes]) -> None:
    for chunk in iter(lambda: stream.read(65536), b""):
        into.append(chunk)
        while len(into) > 2 and sum(len(c) for c in into[1:]) > STDERR_TAIL:
            into.pop(0)
    stream.close()


def run_one(
    key: str,
    argv: Sequence[str],
    deadline: float,
    env: dict | None = None,
    max_bytes: int | None = None,
    each_line: Callable[[bytes], None] | None = None,
) -> Answer:
    """Run `argv`, keep its stdout lines (up to `max_bytes` in all) and the tail of its
    stderr, kill it (its whole
    process group) at `deadline` seconds. With `each_line`, every stdout line is handed to
    it as it comes (in a reader thread) instead of kept; what it raises, run_one raises
    once the command has ended."""
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
    except OSError as error:
        return Answer(key, (), None, error=f"could not start {argv[0]}: {error.strerror}")
    with _LOCK:
        _RUNNING.add(proc)
    try:
        cap = MAX_BYTES if max_bytes is None else max_bytes  # read when called
        return _answer(key, proc, deadline, start, cap, each_line)
    finally:
        with _LOCK:
            _RUNNING.discard(proc)


def _kill(proc: subprocess.Popen, grace: float = 2.0) -> None:
    """End the command's whole group (ssh, srun and what they run): SIGTERM first, which
    srun passes on to the step's tasks on the nodes, then SIGKILL."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def stop_all() -> None:
    """Kill every command still running (a view that quits does not leave them behind)."""
    with _LOCK:
        running = list(_RUNNING)
    for proc in running:
        _kill(proc)


def _answer(
    key: str,
    proc: subprocess.Popen,
    deadline: float,
    start: float,
    max_bytes: int = MAX_BYTES,
    each: Callable[[bytes], None] | None = None,
) -> Answer:
    lines: list[bytes] = []
    errors: list[bytes] = []
    raised: list[Exception] = []
    dropped = [0]
    readers = [
        threading.Thread(
            target=_read_lines,
            args=(proc.stdout, lines, max_bytes, dropped, each, raised),
            daemon=True,
        ),
        threading.Thread(target=_read_tail, args=(proc.stderr, errors), daemon=True),
    ]
    for reader in readers:
        reader.start()
    why = ""
    try:
        proc.wait(timeout=deadline)
    except subprocess.TimeoutExpired:
        why = f"no answer within {deadline:g} s"
        _kill(proc)
        proc.wait()
    for reader in readers:
        # a line handed on is read meanwhile: the pipe holds at most one more to read
        reader.join(timeout=5 if each is None else max(5.0, deadline))
    stderr = b"".join(errors).decode("utf-8", "replace")[-STDERR_TAIL:]
    if raised:
        raise raised[0]
    return Answer(
        key,
        tuple(lines),
        None if why else proc.returncode,
        stderr,
        time.monotonic() - start,
        why,
        dropped[0],
    )


def run_many(
    commands: Sequence[tuple[str, Sequence[str]]],
    deadline: float,
    parallel: int = DEFAULT_PARALLEL,
    env: dict | None = None,
    total: float | None = None,
) -> list[Answer]:
    """Every (key, argv), `parallel` at a time, each within `deadline`, all of them within
    `total` seconds (a command not started by then is not tried); in the given order."""
    end = time.monotonic() + (total if total is not None else float("inf"))

    def bounded(key: str, argv: Sequence[str]) -> Answer:
        left = min(deadline, end - time.monotonic())
        if left <= 0:
            return Answer(key, (), None, error="not tried: the overall deadline had passed")
        return run_one(key, argv, left, env)

    if not commands:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(commands)))) as pool:
        futures = [pool.submit(bounded, key, argv) for key, argv in commands]
        try:
            wait_futures(futures, None)  # in slices: a Ctrl-C is seen at once (collect.waits)
        except KeyboardInterrupt:
            stop_all()  # the commands under way end now: the pool's exit does not wait them out
            raise
        return [f.result() for f in futures]
