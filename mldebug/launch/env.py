"""The environment each rank (or a wrapped launcher) starts with. Pure functions.

`rank_env` is what torchrun gives a worker, so unmodified torchrun scripts work.
`hook_env` is what activates mldebug's hooks in every Python process that inherits it.
"""

from __future__ import annotations

import importlib.util
import os
import socket
from dataclasses import dataclass
from pathlib import Path

import mldebug
from mldebug.launch.flight import ENV_FR_DIR, FR_DIR

# Names the hook and the agent read (mldebug/hooks/sitecustomize.py, mldebug/agent/).
ENV_ACTIVE = "MLDEBUG_HOOK"  # "1": the hook loads the agent; anything else: it does nothing
ENV_PACKAGE_DIR = "MLDEBUG_PACKAGE_DIR"  # where mldebug/agent/ is loaded from, by path
ENV_RUN_DIR = "MLDEBUG_RUN_DIR"
ENV_MODE = "MLDEBUG_MODE"  # MODE_NATIVE or MODE_WRAP
MODE_NATIVE = "native"
MODE_WRAP = "wrap"

FLIGHT_RECORDER_ENTRIES = 2000


@dataclass(frozen=True)
class DebugOptions:
    """The knobs of `mldebug run` that become environment variables of the ranks."""

    cuda_launch_blocking: bool = False
    nccl_debug: str | None = None  # NCCL_DEBUG level: VERSION, WARN, INFO, TRACE
    distributed_debug: bool = False
    flight_recorder: bool = False
    detect_anomaly: str | None = None  # ANOMALY_MODES: NaN/Inf origin hooks in the agent
    tiny_model: str | None = None  # --tiny-model[=SPEC]: the SPEC text ("" for the defaults)


# --detect-anomaly[=MODE] -> MLDEBUG_DETECT_ANOMALY (docs/agent.md, mldebug/agent/anomaly.py)
ENV_DETECT_ANOMALY = "MLDEBUG_DETECT_ANOMALY"
ANOMALY_MODES = {"on": "1", "torch": "torch", "stop": "stop"}

# --tiny-model[=SPEC] -> MLDEBUG_TINY_MODEL (docs/tiny-model.md, mldebug/agent/tinymodel.py)
ENV_TINY_MODEL = "MLDEBUG_TINY_MODEL"


def package_dir() -> Path:
    return Path(mldebug.__file__).resolve().parent


def hooks_dir() -> Path:
    return package_dir() / "hooks"


def _ephemeral_low() -> int:
    """The first port of the kernel's range for outgoing connections (32768 by default)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range", encoding="ascii") as handle:
            return int(handle.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def port_free(host: str, port: int) -> bool:
    """Nothing listens on (or holds) `port` of `host` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now, for the rendezvous.

    Chosen at random below the kernel's range for outgoing connections: a port the kernel
    hands out (bind to 0) can be taken by any new connection before the store listens on it
    (gloo ranks open many), which fails the whole job with EADDRINUSE.
    """
    import random

    high = _ephemeral_low() - 1
    for _ in range(64):
        port = random.randint(min(20000, high - 1), high)
        if port_free(host, port):
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def rank_env(
    rank: int, nproc: int, master_addr: str, master_port: int, run_id: str
) -> dict[str, str]:
    """What torchrun sets for worker `rank` of a single-node job of `nproc` workers."""
    return {
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "WORLD_SIZE": str(nproc),
        "LOCAL_WORLD_SIZE": str(nproc),
        "GROUP_RANK": "0",
        "GROUP_WORLD_SIZE": "1",
        "ROLE_NAME": "default",
        "ROLE_RANK": str(rank),
        "ROLE_WORLD_SIZE": str(nproc),
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(master_port),
        "TORCHELASTIC_RUN_ID": run_id,
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0",
        # No agent store here: rank 0 hosts the TCPStore, as with a plain env:// init.
        "TORCHELASTIC_USE_AGENT_STORE": "False",
    }


def debug_env(options: DebugOptions, run_dir: Path) -> dict[str, str]:
    env: dict[str, str] = {}
    if options.cuda_launch_blocking:
        env["CUDA_LAUNCH_BLOCKING"] = "1"
    if options.nccl_debug:
        env["NCCL_DEBUG"] = options.nccl_debug
        # NCCL itself expands %h (host) and %p (pid).
        env["NCCL_DEBUG_FILE"] = str(run_dir / "nccl" / "%h.%p.log")
    if options.distributed_debug:
        env["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"
    if options.flight_recorder:
        env.update(flight_recorder_env(run_dir, torch_has_fr_names()))
    if options.detect_anomaly:
        env[ENV_DETECT_ANOMALY] = ANOMALY_MODES[options.detect_anomaly]
    if options.tiny_model is not None:
        env[ENV_TINY_MODEL] = options.tiny_model
    return env


def flight_recorder_env(run_dir: Path, new_names: bool | None) -> dict[str, str]:
    """Flight-recorder variables under the names the ranks' torch reads.

    Recent torch reads TORCH_FR_* and warns about the older TORCH_NCCL_* names when they are
    set; older torch knows only those. `new_names` None (unknown): set both.
    """
    prefix = str(run_dir / "fr" / "rank_")  # torch appends the rank
    entries = str(FLIGHT_RECORDER_ENTRIES)
    env = {"TORCH_NCCL_DUMP_ON_TIMEOUT": "1"}
    env[ENV_FR_DIR] = str(run_dir / FR_DIR)  # the agent's dumps on request (launch/flight.py)
    if new_names is not False:
        env.update({"TORCH_FR_BUFFER_SIZE": entries, "TORCH_FR_DUMP_TEMP_FILE": prefix})
    if new_names is not True:
        env.update(
            {"TORCH_NCCL_TRACE_BUFFER_SIZE": entries, "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": prefix}
        )
    return env


def torch_has_fr_names() -> bool | None:
    """Does the torch installed here read TORCH_FR_BUFFER_SIZE? Found without importing it."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    header = Path(
        spec.submodule_search_locations[0],
        "include/torch/csrc/distributed/c10d/FlightRecorder.hpp",
    )
    try:
        return "TORCH_FR_BUFFER_SIZE" in header.read_text(errors="replace")
    except OSError:
        return None


def hook_env(base: dict[str, str], run_dir: Path, mode: str) -> dict[str, str]:
    """Variables that put the hook first on PYTHONPATH and tell it where the run lives."""
    pythonpath = str(hooks_dir())
    if base.get("PYTHONPATH"):
        pythonpath += os.pathsep + base["PYTHONPATH"]
    return {
        "PYTHONPATH": pythonpath,
        ENV_ACTIVE: "1",
        ENV_PACKAGE_DIR: str(package_dir()),
        ENV_RUN_DIR: str(run_dir),
        ENV_MODE: mode,
    }


def job_env(
    base: dict[str, str], run_dir: Path, mode: str, options: DebugOptions
) -> dict[str, str]:
    """The environment shared by every process of the job (before per-rank variables)."""
    env = dict(base)
    env.update(debug_env(options, run_dir))
    env.update(hook_env(base, run_dir, mode))
    return env
