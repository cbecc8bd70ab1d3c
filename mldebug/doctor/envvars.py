"""NCCL_* / TORCH_* / CUDA_* / PYTORCH_* variables that look wrong or stale.

A variable NCCL or torch does not know is silently ignored, and a misspelt one is the
same as none; NCCL reads numbers with strtol, so `NCCL_IB_DISABLE=true` reads as 0. The
names and values here are from NCCL's environment variable documentation and torch's
ProcessGroupNCCL; a name nobody reads is only reported when it is one edit or two away
from a known one (a typo, not some other tool's variable).
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Mapping
from pathlib import Path

from mldebug.doctor.check import FAIL, OK, WARN, Check, Probe
from mldebug.textsafe import one_line

PREFIXES = ("NCCL_", "TORCH_", "CUDA_", "PYTORCH_")

NCCL_INTS = set(
    """NCCL_IB_DISABLE NCCL_P2P_DISABLE NCCL_SHM_DISABLE NCCL_IB_TIMEOUT NCCL_IB_RETRY_CNT
    NCCL_IB_GID_INDEX NCCL_IB_SL NCCL_IB_TC NCCL_IB_QPS_PER_CONNECTION NCCL_IB_CUDA_SUPPORT
    NCCL_IB_PCI_RELAXED_ORDERING NCCL_IB_ADAPTIVE_ROUTING NCCL_IB_SPLIT_DATA_ON_QPS
    NCCL_IB_ROCE_VERSION_NUM NCCL_IB_MERGE_NICS NCCL_BUFFSIZE NCCL_NTHREADS NCCL_MAX_NCHANNELS
    NCCL_MIN_NCHANNELS NCCL_MAX_CTAS NCCL_MIN_CTAS NCCL_CUMEM_ENABLE NCCL_NVLS_ENABLE
    NCCL_COLLNET_ENABLE NCCL_CROSS_NIC NCCL_SOCKET_NTHREADS NCCL_NSOCKS_PERTHREAD
    NCCL_IGNORE_DISABLED_P2P NCCL_IGNORE_CPU_AFFINITY NCCL_NET_GDR_READ NCCL_CHECK_POINTERS
    NCCL_COMM_BLOCKING NCCL_NET_SHARED_BUFFERS NCCL_P2P_NET_CHUNKSIZE NCCL_PXN_DISABLE
    NCCL_RUNTIME_CONNECT NCCL_LOCAL_REGISTER NCCL_GRAPH_REGISTER NCCL_SET_STACK_SIZE
    NCCL_SET_THREAD_NAME NCCL_WORK_FIFO_DEPTH NCCL_NVLS_NCHANNELS NCCL_DMABUF_ENABLE
    NCCL_SHM_USE_CUDA_MEMCPY NCCL_CHECKS_DISABLE NCCL_MNNVL_ENABLE NCCL_RAS_ENABLE
    NCCL_SOCKET_RETRY_CNT NCCL_SOCKET_RETRY_SLEEP_MSEC NCCL_NCHANNELS_PER_NET_PEER
    NCCL_P2P_PXN_LEVEL NCCL_NVB_DISABLE NCCL_IB_USE_INLINE NCCL_IB_AR_THRESHOLD
    NCCL_IB_ECE_ENABLE NCCL_NET_FORCE_FLUSH NCCL_COLLNET_NODE_THRESHOLD""".split()
)
NCCL_OTHERS = set(
    """NCCL_DEBUG NCCL_DEBUG_SUBSYS NCCL_DEBUG_FILE NCCL_DEBUG_TIMESTAMP_FORMAT
    NCCL_SOCKET_IFNAME NCCL_SOCKET_FAMILY NCCL_IB_HCA NCCL_IB_ADDR_FAMILY NCCL_IB_ADDR_RANGE
    NCCL_NET NCCL_NET_PLUGIN NCCL_NET_GDR_LEVEL NCCL_P2P_LEVEL NCCL_ALGO NCCL_PROTO
    NCCL_TOPO_FILE NCCL_TOPO_DUMP_FILE NCCL_GRAPH_FILE NCCL_GRAPH_DUMP_FILE NCCL_LAUNCH_MODE
    NCCL_CONF_FILE NCCL_TUNER_PLUGIN NCCL_PROFILER_PLUGIN NCCL_COMM_ID NCCL_HOSTID
    NCCL_NET_MERGE_LEVEL NCCL_CUDA_PATH NCCL_IB_FIFO_TC NCCL_NET_OVERHEAD
    NCCL_VERSION NCCL_HOME""".split()
)
TORCH_BOOLS = set(
    """TORCH_NCCL_BLOCKING_WAIT TORCH_NCCL_DUMP_ON_TIMEOUT TORCH_NCCL_DESYNC_DEBUG
    TORCH_NCCL_ENABLE_TIMING TORCH_NCCL_ENABLE_MONITORING TORCH_NCCL_AVOID_RECORD_STREAMS
    TORCH_NCCL_HIGH_PRIORITY TORCH_NCCL_NAN_CHECK TORCH_NCCL_USE_COMM_NONBLOCKING
    TORCH_NCCL_TRACE_CPP_STACK TORCH_NCCL_LOG_CPP_STACK_ON_UNCLEAN_SHUTDOWN
    TORCH_NCCL_PROPAGATE_ERROR TORCH_NCCL_RETHROW_CUDA_ERRORS TORCH_NCCL_CUDA_EVENT_CACHE
    TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK TORCH_SHOW_CPP_STACKTRACES
    TORCH_USE_CUDA_DSA TORCH_DIST_INIT_BARRIER TORCH_GLOO_LAZY_INIT
    TORCH_DISABLE_ADDR2LINE TORCH_FORCE_WEIGHTS_ONLY_LOAD
    TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD""".split()
)
TORCH_INTS = set(
    """TORCH_NCCL_ASYNC_ERROR_HANDLING TORCH_FR_BUFFER_SIZE TORCH_NCCL_TRACE_BUFFER_SIZE
    TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC
    TORCH_NCCL_COORD_CHECK_MILSEC""".split()
)
TORCH_OTHERS = set(
    """TORCH_DISTRIBUTED_DEBUG TORCH_CPP_LOG_LEVEL TORCH_FR_DUMP_TEMP_FILE
    TORCH_NCCL_DEBUG_INFO_TEMP_FILE TORCH_NCCL_DEBUG_INFO_PIPE_FILE TORCH_LOGS TORCH_HOME
    TORCH_CUDA_ARCH_LIST TORCH_EXTENSIONS_DIR TORCH_COMPILE_DEBUG TORCH_TRACE
    TORCH_SHOW_DISPATCH_TRACE TORCH_BLAS_PREFER_CUBLASLT TORCH_ALLOW_TF32_CUBLAS_OVERRIDE
    TORCH_DEVICE_BACKEND_AUTOLOAD TORCH_CUDNN_V8_API_ENABLED TORCH_DIST_USE_NCCL2""".split()
)
CUDA_INTS = set(
    """CUDA_LAUNCH_BLOCKING CUDA_DEVICE_MAX_CONNECTIONS CUDA_CACHE_DISABLE
    CUDA_CACHE_MAXSIZE CUDA_ENABLE_COREDUMP_ON_EXCEPTION CUDA_ENABLE_CPU_COREDUMP_ON_EXCEPTION
    CUDA_ENABLE_USER_TRIGGERED_COREDUMP CUDA_COREDUMP_SHOW_PROGRESS
    CUDA_DEVICE_WAITS_ON_EXCEPTION CUDA_FORCE_PTX_JIT CUDA_DISABLE_PTX_JIT
    CUDA_MPS_ACTIVE_THREAD_PERCENTAGE CUDA_AUTO_BOOST
    CUDA_MANAGED_FORCE_DEVICE_ALLOC""".split()
)
CUDA_OTHERS = set(
    """CUDA_VISIBLE_DEVICES CUDA_DEVICE_ORDER CUDA_MODULE_LOADING CUDA_CACHE_PATH CUDA_HOME
    CUDA_PATH CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY CUDA_COREDUMP_FILE
    CUDA_VERSION CUDA_DRIVER_VERSION""".split()
)
PYTORCH_KNOWN = set(
    """PYTORCH_CUDA_ALLOC_CONF PYTORCH_ALLOC_CONF PYTORCH_NO_CUDA_MEMORY_CACHING
    PYTORCH_NVML_BASED_CUDA_CHECK PYTORCH_JIT PYTORCH_ENABLE_MPS_FALLBACK
    PYTORCH_VERSION""".split()
)
KNOWN = (
    NCCL_INTS | NCCL_OTHERS | TORCH_BOOLS | TORCH_INTS | TORCH_OTHERS | CUDA_INTS | CUDA_OTHERS
) | PYTORCH_KNOWN

# Names that still work, or used to, and have a newer spelling.
RENAMED = {
    "TORCH_NCCL_TRACE_BUFFER_SIZE": "TORCH_FR_BUFFER_SIZE",
    "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": "TORCH_FR_DUMP_TEMP_FILE",
    "NCCL_ASYNC_ERROR_HANDLING": "TORCH_NCCL_ASYNC_ERROR_HANDLING",
    "NCCL_BLOCKING_WAIT": "TORCH_NCCL_BLOCKING_WAIT",
    "NCCL_DESYNC_DEBUG": "TORCH_NCCL_DESYNC_DEBUG",
}
REMOVED = {
    "NCCL_LL_THRESHOLD": "NCCL ignores it since 2.5 (use NCCL_PROTO)",
    "NCCL_TREE_THRESHOLD": "NCCL ignores it since 2.5 (use NCCL_ALGO)",
}
CHOICES = {
    "NCCL_DEBUG": {"VERSION", "WARN", "INFO", "TRACE", "ABORT"},
    "TORCH_DISTRIBUTED_DEBUG": {"OFF", "INFO", "DETAIL"},
    "NCCL_SOCKET_FAMILY": {"AF_INET", "AF_INET6"},
    "CUDA_DEVICE_ORDER": {"FASTEST_FIRST", "PCI_BUS_ID"},
    "CUDA_MODULE_LOADING": {"LAZY", "EAGER"},
}
SUBSYSTEMS = set(
    "INIT COLL P2P SHM NET GRAPH TUNING ENV ALLOC CALL PROXY NVLS BOOTSTRAP REG PROFILE RAS ALL".split()
)
ALLOC_KEYS = set(
    """expandable_segments max_split_size_mb garbage_collection_threshold
    roundup_power2_divisions backend release_lock_on_cudamalloc pinned_use_cuda_host_register
    pinned_num_register_threads pinned_use_background_threads
    graph_capture_record_stream_reuse per_process_memory_fraction""".split()
)
BOOL_WORDS = {"0", "1", "true", "false", "yes", "no", "y", "n", "on", "off"}
BOOL_OFF = {"0", "false", "no", "off", "n"}
_INT = re.compile(r"[-+]?\d+$")
_UUID = re.compile(r"(GPU|MIG)-[0-9A-Za-z-]+$")


def interfaces(net: Path = Path("/sys/class/net")) -> list[str]:
    try:
        return sorted(entry.name for entry in net.iterdir())
    except OSError:
        return []


def adapters(ib: Path = Path("/sys/class/infiniband")) -> list[str]:
    try:
        return sorted(entry.name for entry in ib.iterdir())
    except OSError:
        return []


def _name_filter(value: str, names: list[str]) -> tuple[str, list[str]]:
    """NCCL's interface / HCA list: `^` excludes, `=` asks for exact names, else prefixes.
    Returns (mode, the names it selects)."""
    exclude = value.startswith("^")
    value = value.lstrip("^")
    exact = value.startswith("=")
    value = value.lstrip("=")
    wanted = [w.split(":")[0] for w in value.split(",") if w.strip()]

    def hit(name: str) -> bool:
        return any(name == w if exact else name.startswith(w) for w in wanted)

    chosen = [n for n in names if hit(n) != exclude]
    return ("exclude" if exclude else "include"), chosen


def _ifname(var: str, value: str, names: list[str]) -> Check | None:
    if not names:
        return None
    if var == "GLOO_SOCKET_IFNAME":
        missing = [n for n in value.split(",") if n and n not in names]
        if missing:
            return Check(
                f"env {var}",
                FAIL,
                f"{var}={value}: no interface {', '.join(missing)} here (this machine has "
                f"{', '.join(names)})",
                "nccl-init-failure",
            )
        return None
    mode, chosen = _name_filter(value, names)
    if mode == "exclude":
        chosen = [n for n in chosen if n != "lo"]
    if not chosen:
        return Check(
            f"env {var}",
            FAIL,
            f"{var}={value} selects no interface of this machine ({', '.join(names)}): NCCL "
            "will fail to start ('no socket interface found')",
            "nccl-init-failure",
        )
    return None


def _visible_devices(value: str) -> str:
    if value.strip() == "":
        return "is empty: it hides every GPU"
    entries = [e.strip() for e in value.split(",")]
    seen = set()
    for index, entry in enumerate(entries):
        if _INT.match(entry):
            if int(entry) < 0:
                return f"entry {entry!r} hides it and every GPU after it"
        elif not _UUID.match(entry):
            hidden = ", ".join(entries[index + 1 :]) or "none"
            return (
                f"entry {entry!r} is neither an index nor a GPU-/MIG- UUID: CUDA stops at it "
                f"(hidden after it: {hidden})"
            )
        if entry in seen:
            return f"lists {entry!r} twice"
        seen.add(entry)
    return ""


def _alloc_conf(value: str) -> str:
    bad = []
    for part in value.split(","):
        key = part.split(":")[0].strip()
        if key and key not in ALLOC_KEYS:
            near = difflib.get_close_matches(key, ALLOC_KEYS, n=1, cutoff=0.75)
            bad.append(f"{key!r}" + (f" (did you mean {near[0]}?)" if near else ""))
    return (
        f"unknown option {', '.join(bad)}: torch refuses it at the first CUDA allocation"
        if bad
        else ""
    )


def _recipe(var: str) -> str:
    if var.startswith(("PYTORCH_", "CUDA_VISIBLE")):
        return "cuda-oom-fragmentation" if var.startswith("PYTORCH_") else "nccl-init-failure"
    if var.startswith("TORCH_"):
        return "nccl-watchdog-timeout"
    if var.startswith("CUDA_"):
        return "cuda-async-error"
    return "nccl-init-failure"


def check_env(
    env: Mapping[str, str] | None = None,
    net: Path = Path("/sys/class/net"),
    ib: Path = Path("/sys/class/infiniband"),
) -> list[Check]:
    env = dict(os.environ if env is None else env)
    names = interfaces(net)
    hcas = adapters(ib)
    ours = sorted(k for k in env if k.startswith(PREFIXES) or k == "GLOO_SOCKET_IFNAME")
    checks: list[Check] = []

    def warn(var: str, detail: str, status: str = WARN, recipe: str | None = None) -> None:
        value = one_line(env[var])[:120]
        checks.append(
            Check(
                f"env {var}", status, f"{var}={value}: {one_line(detail)}", recipe or _recipe(var)
            )
        )

    for var in ours:
        value = env[var]
        if var in RENAMED:
            warn(var, f"deprecated name: use {RENAMED[var]}")
        elif var in REMOVED:
            warn(var, REMOVED[var])
        elif var not in KNOWN and var != "GLOO_SOCKET_IFNAME":
            near = difflib.get_close_matches(var, KNOWN, n=1, cutoff=0.85)
            if near:
                warn(var, f"not a variable anything reads: did you mean {near[0]}?")
            continue
        if var in NCCL_INTS | TORCH_INTS | CUDA_INTS and not _INT.match(value.strip()):
            note = " (NCCL reads it as 0)" if var.startswith("NCCL_") else ""
            warn(var, f"should be a whole number{note}")
        elif var in TORCH_BOOLS and value.strip().lower() not in BOOL_WORDS:
            warn(var, "should be 0 or 1")
        elif var in CHOICES and value.strip().upper() not in CHOICES[var]:
            warn(var, f"should be one of {', '.join(sorted(CHOICES[var]))}")
        elif var == "TORCH_DIST_USE_NCCL2" and value != "0" and value.strip().lower() in BOOL_OFF:
            # torch 2.15 compares it with "0" alone (distributed_c10d.py)
            warn(
                var,
                'torch rolls "nccl" back to the stock ProcessGroupNCCL only for the value 0: '
                "this one keeps ProcessGroupNCCL2 (set it to 0, or init_process_group("
                'backend="nccl-legacy"))',
            )
        elif var == "NCCL_DEBUG_SUBSYS":
            unknown = [s for s in value.upper().lstrip("^").split(",") if s and s not in SUBSYSTEMS]
            if unknown:
                warn(var, f"unknown subsystem(s) {', '.join(unknown)}")
        elif var in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"):
            found = _ifname(var, value, names)
            if found:
                checks.append(found)
        elif var == "NCCL_IB_HCA":
            if not hcas:
                warn(var, "this machine has no InfiniBand adapters (/sys/class/infiniband)")
            elif not _name_filter(value, hcas)[1]:
                warn(var, f"selects none of this machine's adapters ({', '.join(hcas)})", FAIL)
        elif var == "CUDA_VISIBLE_DEVICES":
            problem = _visible_devices(value)
            if problem:
                warn(var, problem)
        elif var in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
            problem = _alloc_conf(value)
            if problem:
                warn(var, problem)
        elif var in ("NCCL_TOPO_FILE", "NCCL_CONF_FILE", "NCCL_GRAPH_FILE"):
            if not os.path.isfile(value):
                warn(var, "no such file")
        elif var == "NCCL_DEBUG_FILE":
            folder = os.path.dirname(value) or "."
            if not os.path.isdir(folder):
                warn(var, f"its directory {folder} does not exist: NCCL writes no log")
        if var == "NCCL_IB_DISABLE" and value.strip() == "1" and hcas:
            warn(
                var,
                f"InfiniBand is off although adapters exist ({', '.join(hcas)})",
                recipe="nccl-sockets-instead-of-ib",
            )
    # Values are the user's text: one line, no control sequences, whatever they hold.
    checks = [Check(one_line(c.name), c.status, one_line(c.detail), c.recipe) for c in checks]
    if not checks:
        detail = f"{len(ours)} NCCL_/TORCH_/CUDA_/PYTORCH_ variable(s) set, none looks wrong"
        checks.append(Check("env", OK, detail, "nccl-init-failure"))
    return checks


def probes() -> list[Probe]:
    return [Probe("env", check_env, "nccl-init-failure", timeout=5.0)]
