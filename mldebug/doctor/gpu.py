"""Checks of torch, CUDA, NCCL and the GPUs. Never imports torch in this process: a
subprocess with a timeout does, so the doctor stays quick and safe on a login node."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from mldebug.doctor.check import FAIL, OK, SKIP, WARN, Check, Probe
from mldebug.files.procfs import proc_stat
from mldebug.files.rundir import is_live, list_runs
from mldebug.textsafe import one_line

TORCH_TIMEOUT = 60.0  # importing torch takes 20-30 s on a loaded machine
DEVICE = re.compile(r"/dev/nvidia\d+$")

_TORCH_PROBE = """
import json
try:
    import torch
except Exception as error:
    print(json.dumps({"missing": f"{type(error).__name__}: {error}"}))
    raise SystemExit
import os, sys
info = {"torch": torch.__version__, "cuda": torch.version.cuda, "nccl": None,
        "available": False, "count": 0, "reason": "",
        "python": ".".join(map(str, sys.version_info[:3])), "nccl2": False}
try:  # torch 2.15: "nccl" is ProcessGroupNCCL2 unless TORCH_DIST_USE_NCCL2=0
    from torch._C import _distributed_c10d as c10d
    info["nccl2"] = hasattr(c10d, "ProcessGroupNCCL2")
except Exception:
    pass
try:
    info["available"] = torch.cuda.is_available()
    info["count"] = torch.cuda.device_count() if info["available"] else 0
    if torch.cuda.is_available() or torch.version.cuda:
        v = torch.cuda.nccl.version()
        info["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
except Exception as error:
    info["reason"] = f"{type(error).__name__}: {error}"
print(json.dumps(info))
"""


def torch_check(python: str = sys.executable) -> list[Check]:
    recipe = "nccl-version-mismatch"
    try:
        done = subprocess.run(
            [python, "-c", _TORCH_PROBE],
            capture_output=True,
            text=True,
            timeout=TORCH_TIMEOUT,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return [Check("torch", WARN, f"importing torch took over {TORCH_TIMEOUT:g} s", recipe)]
    except OSError as error:
        return [Check("torch", WARN, f"could not start {python}: {error.strerror}", recipe)]
    lines = done.stdout.strip().splitlines()
    try:
        info = json.loads(lines[-1]) if lines else {}
    except ValueError:
        info = {}
    if not isinstance(info, dict) or not info:
        tail = one_line(done.stderr.strip()[-300:]) or f"exit code {done.returncode}"
        return [Check("torch", WARN, f"could not ask torch for its versions: {tail}", recipe)]
    if "missing" in info:
        detail = f"torch is not importable by {python}: {one_line(str(info['missing']))}"
        return [Check("torch", SKIP, detail, recipe)]
    cuda = info.get("cuda") or "none (a CPU build)"
    nccl = info.get("nccl") or "n/a"
    detail = one_line(f"torch {info.get('torch')}, CUDA {cuda}, NCCL {nccl}")
    if info.get("cuda") and not info.get("available"):
        reason = info.get("reason") or "torch.cuda.is_available() is False"
        return [Check("torch", WARN, f"{detail}; but no GPU is usable: {one_line(reason)}", recipe)]
    if info.get("available"):
        detail += f"; {info.get('count')} GPU(s) usable"
    if info.get("nccl2"):
        legacy = os.environ.get("TORCH_DIST_USE_NCCL2") == "0"
        detail += (
            '; backend "nccl" is the stock ProcessGroupNCCL (TORCH_DIST_USE_NCCL2=0)'
            if legacy
            else '; backend "nccl" is ProcessGroupNCCL2 (TORCH_DIST_USE_NCCL2=0 or '
            'backend "nccl-legacy" gives the stock one)'
        )
    return [Check("torch", OK, detail, recipe), support_check(info)]


# What mldebug is tested on (README "Supported", .ci/compat): outside it, it may still work.
SUPPORTED_TORCH = ((2, 4), (2, 15))
SUPPORTED_PYTHON = ((3, 10), (3, 13))


def _version(text: object) -> tuple[int, int] | None:
    found = re.match(r"(\d+)\.(\d+)", str(text or ""))
    return (int(found.group(1)), int(found.group(2))) if found else None


def support_check(info: dict) -> Check:
    """Are the job's torch and Python in the range mldebug is tested on?"""
    outside = []
    for name, value, (low, high) in (
        ("torch", info.get("torch"), SUPPORTED_TORCH),
        ("Python", info.get("python"), SUPPORTED_PYTHON),
    ):
        version = _version(value)
        if version is not None and not low <= version <= high:
            span = f"{low[0]}.{low[1]}-{high[0]}.{high[1]}"
            outside.append(f"{name} {one_line(str(value))[:20]} is outside {span}")
    torch_range = "{}.{}-{}.{}".format(*SUPPORTED_TORCH[0], *SUPPORTED_TORCH[1])
    python_range = "{}.{}-{}.{}".format(*SUPPORTED_PYTHON[0], *SUPPORTED_PYTHON[1])
    if outside:
        detail = "; ".join(outside) + (
            f": mldebug is tested on torch {torch_range} and Python {python_range} "
            "(README, Supported); it may still work, but what it reads there is not checked"
        )
        return Check("supported", WARN, detail, "unsupported-versions")
    detail = f"torch {info.get('torch')} and Python {info.get('python')} are in the tested range"
    return Check("supported", OK, one_line(detail), "unsupported-versions")


def _nvml() -> tuple[str, list[str]] | None:
    """(driver version, GPU names) from NVML, or None when nvidia-ml-py is not installed."""
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        return None
    pynvml.nvmlInit()
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        names = [
            pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i))
            for i in range(pynvml.nvmlDeviceGetCount())
        ]
    finally:
        pynvml.nvmlShutdown()
    decode = lambda v: v.decode() if isinstance(v, bytes) else str(v)  # noqa: E731
    return decode(driver), [decode(n) for n in names]


def gpus_check(dev: Path = Path("/dev")) -> list[Check]:
    recipe = "xid-ecc-errors"
    devices = sorted(p.name for p in dev.glob("nvidia*") if DEVICE.search(str(p)))
    try:
        found = _nvml()
    except Exception as error:  # NVML present but the driver refuses: that is the finding
        return [Check("gpus", FAIL, f"NVML did not start: {one_line(str(error))}", recipe)]
    if found is not None:
        driver, names = found
        if not names:
            return [Check("gpus", WARN, f"NVML (driver {driver}) sees no GPU", recipe)]
        listed = ", ".join(one_line(n) for n in names)
        return [Check("gpus", OK, f"driver {driver}, {len(names)} GPU(s): {listed}", recipe)]
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            done = subprocess.run(
                [smi, "-L"], capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL
            )
        except subprocess.TimeoutExpired:
            return [Check("gpus", FAIL, "nvidia-smi -L did not answer in 10 s", recipe)]
        gpus = [line for line in done.stdout.splitlines() if line.startswith("GPU ")]
        if done.returncode != 0 or not gpus:
            why = one_line((done.stdout + done.stderr).strip()[:300])
            return [Check("gpus", FAIL, f"nvidia-smi sees no GPU: {why}", recipe)]
        return [Check("gpus", OK, f"{len(gpus)} GPU(s): " + "; ".join(gpus[:8]), recipe)]
    reason = "no NVIDIA GPU here: nvidia-ml-py is not installed, nvidia-smi is not on PATH"
    reason += (
        f", device files {', '.join(devices)} exist" if devices else ", and no /dev/nvidia* devices"
    )
    return [Check("gpus", SKIP, reason, recipe)]


def _live_run_pids() -> set[int]:
    """Pids of the launchers and ranks of live `mldebug run` jobs of this user."""
    pids: set[int] = set()
    try:
        runs = list_runs()
    except OSError:
        return pids
    for _path, manifest in runs:
        if not is_live(manifest):
            continue
        for key in ("mldebug_pid", "launcher_pid"):
            if isinstance(manifest.get(key), int):
                pids.add(manifest[key])
        for rank in manifest.get("ranks") or []:
            if isinstance(rank, dict) and isinstance(rank.get("pid"), int):
                pids.add(rank["pid"])
    return pids


def _parent(pid: int) -> int | None:
    stat = proc_stat(pid)
    try:
        return int(stat[1]) if stat else None  # fields after the name: state, ppid, ...
    except (IndexError, ValueError):
        return None


def _in_job(pid: int, job_pids: set[int]) -> bool:
    """`pid` or one of its ancestors is a live job's process."""
    hops = 0
    while pid and pid > 1 and hops < 64:
        if pid in job_pids:
            return True
        pid, hops = _parent(pid) or 0, hops + 1
    return False


def gpu_holders(device: re.Pattern = DEVICE, proc: Path = Path("/proc")) -> tuple[dict, int]:
    """{pid: device paths} of the processes with a GPU device open, and how many processes'
    descriptors could not be read (another user's, as non-root)."""
    holders: dict[int, list[str]] = {}
    unreadable = 0
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            fds = list((entry / "fd").iterdir())
        except PermissionError:
            unreadable += 1
            continue
        except OSError:
            continue
        for fd in fds[:65536]:
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if device.search(target):
                holders.setdefault(int(entry.name), []).append(target)
    return holders, unreadable


# Processes that adopt orphans: a process whose parent is one of them lost its own.
INIT_NAMES = {"systemd", "init", "tini", "dumb-init", "docker-init", "catatonit"}


def _orphaned(pid: int) -> bool:
    parent = _parent(pid) or 0
    if parent <= 1:
        return True
    try:
        name = Path(f"/proc/{parent}/comm").read_text(errors="replace").strip()
    except OSError:
        return False
    return name in INIT_NAMES


def _describe(pid: int) -> str:
    try:
        cmd = (Path(f"/proc/{pid}/cmdline").read_bytes()[:200]).replace(b"\0", b" ")
        uid = os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return f"pid {pid}"
    return f"pid {pid} (uid {uid}, parent {_parent(pid)}): {one_line(cmd.decode('utf-8', 'replace').strip())}"


def holders_check(device: re.Pattern = DEVICE, dev: Path = Path("/dev")) -> list[Check]:
    recipe = "zombie-gpu-processes"
    if device is DEVICE and not any(DEVICE.search(str(p)) for p in dev.glob("nvidia*")):
        return [Check("gpu-holders", SKIP, "no /dev/nvidia* devices on this machine", recipe)]
    holders, unreadable = gpu_holders(device)
    job_pids = _live_run_pids()
    # Not part of a live mldebug run, and orphaned (its parent is gone: re-parented to init
    # or a subreaper): a rank or worker its launcher left behind.
    stray = [pid for pid in holders if not _in_job(pid, job_pids) and _orphaned(pid)]
    note = f"; {unreadable} processes of other users could not be checked" if unreadable else ""
    if stray:
        listed = "; ".join(_describe(pid) for pid in sorted(stray)[:8])
        return [
            Check(
                "gpu-holders",
                WARN,
                f"{len(stray)} orphaned process(es) hold a GPU and belong to no live job: "
                f"{listed}{note}",
                recipe,
            )
        ]
    detail = f"{len(holders)} process(es) hold a GPU, none orphaned{note}"
    return [Check("gpu-holders", OK, detail, recipe)]


def probes() -> list[Probe]:
    return [
        Probe("torch", torch_check, "nccl-version-mismatch", timeout=TORCH_TIMEOUT + 5),
        Probe("gpus", gpus_check, "xid-ecc-errors", timeout=15.0),
        Probe("gpu-holders", holders_check, "zombie-gpu-processes", timeout=15.0),
    ]
