"""The messages explain reads by their format: each entry is a message as the code that prints
it writes it (`format`, with `{name}` for its variable parts), where it comes from, what it
means, how bad it is, where its rank is, and the recipe.

The entries' type and how a format becomes a pattern are formats.py's.
`readers/messages.py` reads every entry whose `reader` is "messages"; the others name the
reader of `readers/` that reads them (a message whose meaning needs the lines around it: a
torchelastic summary, an OOM's numbers, NCCL's "Last error:"). Every entry's format makes a
test line (tests/test_explain_catalog.py): the pattern must read its parts back, and explain
must give the entry's kind and recipe for it.

A placeholder's name says what it matches (PARTS); `choices` narrows one to listed values
(the CUDA error strings of a family), and `recipe_by` picks the recipe by one part's value
(a DataLoader worker killed by "Bus error" is /dev/shm, by "Killed" the OOM killer).
Data only: the patterns are built once, on first use.
__all__ names what the readers and the tests take from here.
"""

from __future__ import annotations

from mldebug.explain.finding import (
    KIND_CHILD_FAILED,
    KIND_CUDA_ERROR,
    KIND_CUDA_OOM,
    KIND_DATALOADER,
    KIND_DDP_MODEL_MISMATCH,
    KIND_FSDP_STATE,
    KIND_GLOO_INTERFACE,
    KIND_GPU_HARDWARE,
    KIND_HARMLESS,
    KIND_HOST_OOM,
    KIND_LOSS_SCALE,
    KIND_NATIVE_CRASH,
    KIND_NCCL_CUDA_OOM,
    KIND_NCCL_ERROR,
    KIND_NCCL_INTERFACE,
    KIND_PORT_IN_USE,
)
from mldebug.explain.formats import PARTS, RANK_PREFIX, Message, compile_format
from mldebug.model import (
    KIND_NCCL_INIT,
    KIND_NCCL_NETWORK,
    KIND_NCCL_VERSION,
    KIND_RENDEZVOUS,
    SEVERITY_INFO,
    SEVERITY_WARNING,
)

# The CUDA runtime's error strings (cudaGetErrorString, CUDA 11-12), by what they mean for a
# training job. torch prints them as "CUDA error: <string>" (c10/cuda/CUDAException.h).
CUDA_KERNEL_FAULTS = (
    "an illegal memory access was encountered",
    "device-side assert triggered",
    "unspecified launch failure",
    "misaligned address",
    "an illegal instruction was encountered",
    "hardware stack error",
    "invalid program counter",
    "operation not supported on global/shared address space",
    "the launch timed out and was terminated",
    "too many resources requested for launch",
    "invalid configuration argument",
    "invalid argument",
    "too many blocks in cooperative launch",
)
CUDA_HARDWARE = (
    "uncorrectable ECC error encountered",
    "uncorrectable NVLink error detected during the execution",
    "unknown error",
)
CUDA_SETUP = (
    "no kernel image is available for execution on the device",
    "device kernel image is invalid",
    "CUDA driver version is insufficient for CUDA runtime version",
    "forward compatibility was attempted on non supported HW",
    "system has unsupported display driver / cuda driver combination",
    "no CUDA-capable device is detected",
    "invalid device ordinal",
    "initialization error",
    "system not yet initialized",
    "driver shutting down",
)
CUDA_BUSY = ("CUDA-capable device(s) is/are busy or unavailable",)
CUDA_OOM = ("out of memory",)
CUBLAS_FAULTS = ("CUBLAS_STATUS_EXECUTION_FAILED", "CUBLAS_STATUS_INTERNAL_ERROR")
CUBLAS_SETUP = (
    "CUBLAS_STATUS_NOT_INITIALIZED",
    "CUBLAS_STATUS_ARCH_MISMATCH",
    "CUBLAS_STATUS_NOT_SUPPORTED",
)
CUDNN_FAULTS = ("CUDNN_STATUS_EXECUTION_FAILED", "CUDNN_STATUS_INTERNAL_ERROR")
CUDNN_SETUP = (
    "CUDNN_STATUS_NOT_INITIALIZED",
    "CUDNN_STATUS_ARCH_MISMATCH",
    "CUDNN_STATUS_NOT_SUPPORTED",
    "CUDNN_STATUS_VERSION_MISMATCH",
)
# Xid codes (NVIDIA's Xid catalog): the hardware or the driver lost the GPU or its memory;
# and those a program's own fault raises (its kernel read out of bounds, an MMU fault).
XID_HARDWARE = ("79", "74", "48", "63", "64", "92", "94", "95", "119", "120", "61", "62", "154")
XID_PROGRAM = ("13", "31", "43")

ADDRESS_IN_USE = (
    "the port is already taken: a job still running (or a leftover torchrun of an earlier "
    "run) holds it"
)
PORT_FIX = (
    "find who holds it (`ss -ltnp 'sport = :PORT'`), end that process or give this run "
    "another --master-port / --rdzv-endpoint port"
)
CUDA_FAULT_FIX = (
    "rerun one rank with CUDA_LAUNCH_BLOCKING=1 (or under compute-sanitizer) so the error "
    "points at the kernel that failed"
)

CATALOG: tuple[Message, ...] = (
    # ---------------------------------------------------------------- CUDA (torch's check)
    Message(
        "cuda-kernel-fault",
        "torch CUDA check",
        "c10/cuda/CUDAException.h (torch 1.x-2.15), raised as RuntimeError / AcceleratorError, "
        "and by the NCCL watchdog when a collective's event query fails",
        "CUDA error: {err}",
        "a GPU kernel faulted; CUDA reports it at the next call that waits for the GPU, so the "
        "stack and the collective around it are where it was noticed, not where it happened",
        KIND_CUDA_ERROR,
        "cuda-async-error",
        confidence=0.9,
        fix=CUDA_FAULT_FIX,
        choices=(("err", CUDA_KERNEL_FAULTS),),
    ),
    Message(
        "cuda-hardware",
        "torch CUDA check",
        "c10/cuda/CUDAException.h",
        "CUDA error: {err}",
        "the GPU or its memory failed (ECC, NVLink, or a GPU lost by the driver)",
        KIND_GPU_HARDWARE,
        "xid-ecc-errors",
        confidence=0.6,
        fix="read the node's kernel log for Xid lines (`sudo dmesg -T | grep -i xid`) and "
        "`nvidia-smi -q -d ECC`",
        choices=(("err", CUDA_HARDWARE),),
    ),
    Message(
        "cuda-setup",
        "torch CUDA check",
        "c10/cuda/CUDAException.h",
        "CUDA error: {err}",
        "CUDA could not run here at all: driver, build or device selection",
        KIND_CUDA_ERROR,
        "nccl-version-mismatch",
        confidence=0.7,
        fix="compare `nvidia-smi` (driver) with `python -c 'import torch; print(torch.version.cuda, "
        "torch.cuda.get_arch_list())'` on that node",
        choices=(("err", CUDA_SETUP),),
    ),
    Message(
        "cuda-busy",
        "torch CUDA check",
        "c10/cuda/CUDAException.h",
        "CUDA error: {err}",
        "the GPU is taken: exclusive-process mode and another process on it",
        KIND_CUDA_ERROR,
        "zombie-gpu-processes",
        confidence=0.8,
        choices=(("err", CUDA_BUSY),),
    ),
    Message(
        "cuda-runtime-oom",
        "torch CUDA check",
        "c10/cuda/CUDAException.h (a CUDA call outside the caching allocator)",
        "CUDA error: {err}",
        "the GPU's memory is full (a CUDA call outside torch's allocator could not get memory)",
        KIND_CUDA_OOM,
        "cuda-oom",
        confidence=0.75,
        choices=(("err", CUDA_OOM),),
    ),
    Message(
        "device-assert",
        "CUDA device assert",
        "aten/src/ATen/native/cuda/*.cu CUDA_KERNEL_ASSERT (the device's printf of assert)",
        "{kernel}: {text}: block: [{dims}], thread: [{dims2}] Assertion `{text2}` failed.",
        "a kernel's own check failed on the GPU (an index out of range: a label >= num_classes, "
        "a token id >= the vocabulary)",
        KIND_CUDA_ERROR,
        "cuda-async-error",
        confidence=0.92,
        fix="run that batch on the CPU (or with CUDA_LAUNCH_BLOCKING=1): the failing index "
        "shows as an IndexError; check labels and token ids against the model's sizes",
    ),
    Message(
        "cublas-fault",
        "cuBLAS status",
        "aten/src/ATen/cuda/CUDABlas.cpp TORCH_CUDABLAS_CHECK",
        "CUDA error: {status}",
        "a cuBLAS call failed on the GPU: most often an earlier kernel's fault or bad input",
        KIND_CUDA_ERROR,
        "cuda-async-error",
        confidence=0.88,
        fix=CUDA_FAULT_FIX,
        choices=(("status", CUBLAS_FAULTS),),
    ),
    Message(
        "cublas-setup",
        "cuBLAS status",
        "aten/src/ATen/cuda/CUDABlas.cpp",
        "CUDA error: {status}",
        "cuBLAS cannot run this (its library, the GPU's architecture or its memory)",
        KIND_CUDA_ERROR,
        "nccl-version-mismatch",
        confidence=0.7,
        choices=(("status", CUBLAS_SETUP),),
    ),
    Message(
        "cublas-alloc",
        "cuBLAS status",
        "aten/src/ATen/cuda/CUDABlas.cpp",
        "CUDA error: CUBLAS_STATUS_ALLOC_FAILED",
        "cuBLAS could not allocate its workspace: the GPU's memory is full",
        KIND_CUDA_OOM,
        "cuda-oom",
        confidence=0.8,
    ),
    Message(
        "cudnn-fault",
        "cuDNN status",
        "aten/src/ATen/cudnn/Exceptions.h",
        "cuDNN error: {status}",
        "a cuDNN call failed on the GPU (an earlier fault, or out of memory inside cuDNN)",
        KIND_CUDA_ERROR,
        "cuda-async-error",
        confidence=0.8,
        fix=CUDA_FAULT_FIX,
        choices=(("status", CUDNN_FAULTS),),
    ),
    Message(
        "cudnn-setup",
        "cuDNN status",
        "aten/src/ATen/cudnn/Exceptions.h",
        "cuDNN error: {status}",
        "cuDNN cannot run here (its version, the GPU, or an unsupported configuration)",
        KIND_CUDA_ERROR,
        "nccl-version-mismatch",
        confidence=0.7,
        choices=(("status", CUDNN_SETUP),),
    ),
    # ---------------------------------------------------------------- DataLoader
    Message(
        "dataloader-killed",
        "torch DataLoader",
        "torch/utils/data/_utils/signal_handling.py and dataloader.py (1.x-2.15)",
        "DataLoader worker (pid {pid}) is killed by signal: {word}.",
        "a DataLoader worker process died of a signal",
        KIND_DATALOADER,
        "dataloader-worker-hang",
        confidence=0.85,
        fix="Bus error: give the container more /dev/shm (`--shm-size=16g` or `--ipc=host`); "
        "Killed: the host ran out of memory (`dmesg -T | grep -i oom`): fewer workers or a "
        "smaller prefetch_factor",
        recipe_by=(
            "word",
            (("Killed", "memory-leak"), ("Segmentation fault", "native-crash")),
        ),
    ),
    Message(
        "dataloader-shm",
        "torch DataLoader",
        "torch/csrc/DataLoader.cpp (the worker's SIGBUS handler)",
        "ERROR: Unexpected bus error encountered in worker. This might be caused by "
        "insufficient shared memory (shm).",
        "a DataLoader worker ran out of shared memory (/dev/shm)",
        KIND_DATALOADER,
        "dataloader-worker-hang",
        confidence=0.84,
        fix="give the container more /dev/shm (`docker run --shm-size=16g` or `--ipc=host`)",
    ),
    Message(
        "dataloader-exited",
        "torch DataLoader",
        "torch/utils/data/dataloader.py _try_get_data",
        "DataLoader worker (pid(s) {text}) exited unexpectedly",
        "a DataLoader worker process ended without a Python error",
        KIND_DATALOADER,
        "dataloader-worker-hang",
        confidence=0.6,
        fix="run with num_workers=0 once to see the worker's own error",
    ),
    Message(
        "dataloader-timeout",
        "torch DataLoader",
        "torch/utils/data/dataloader.py _try_get_data",
        "DataLoader timed out after {n} seconds",
        "no batch came from the DataLoader's workers within its timeout",
        KIND_DATALOADER,
        "dataloader-worker-hang",
        confidence=0.75,
    ),
    # ---------------------------------------------------------------- c10d store / sockets
    Message(
        "bind-in-use",
        "torch c10d socket",
        "torch/csrc/distributed/c10d/socket.cpp (torch 1.12-2.15)",
        "The server socket has failed to bind to {addr} (errno: 98 - Address already in use)",
        ADDRESS_IN_USE,
        KIND_PORT_IN_USE,
        "port-in-use",
        confidence=0.9,
        rank="none",
        fix=PORT_FIX,
    ),
    Message(
        "listen-in-use",
        "torch c10d socket",
        "torch/csrc/distributed/c10d/socket.cpp (torch 2.2+ DistNetworkError)",
        "port: {port}, useIpv6: {flag}, code: -98, name: EADDRINUSE, message: address already "
        "in use",
        ADDRESS_IN_USE,
        KIND_PORT_IN_USE,
        "port-in-use",
        confidence=0.9,
        rank="none",
        fix=PORT_FIX,
    ),
    Message(
        "store-in-use-1x",
        "torch c10d TCPStore",
        "torch/lib/c10d/TCPStore.cpp (torch 1.x)",
        "RuntimeError: Address already in use",
        ADDRESS_IN_USE,
        KIND_PORT_IN_USE,
        "port-in-use",
        confidence=0.85,
        rank="none",
        fix=PORT_FIX,
    ),
    # ---------------------------------------------------------------- DDP / FSDP2 checks
    Message(
        "ddp-param-count",
        "torch DDP start-up check",
        "torch/csrc/distributed/c10d/reducer.cpp verify_params_across_processes (1.9-2.15)",
        "DDP expects same model across all ranks, but Rank {rank} has {n} params, while rank "
        "{rank2} has inconsistent {n2} params.",
        "the ranks built different models before DDP wrapped them (a rank-only branch, LoRA or "
        "an adapter added on some ranks, another config); with 0 params on one side, that rank "
        "may instead have been late and the check's all-gather returned nothing",
        KIND_DDP_MODEL_MISMATCH,
        "ddp-model-mismatch",
        confidence=0.92,
        rank="rank2",
        fix="print `sum(1 for _ in model.parameters())` on every rank just before DDP(...)",
    ),
    Message(
        "ddp-param-shape",
        "torch DDP start-up check",
        "torch/csrc/distributed/c10d/reducer.cpp verify_params_across_processes",
        "params[{n}] in this process with sizes {states} appears not to match sizes of the "
        "same param in process 0.",
        "one parameter's shape differs between the ranks: the ranks built different models",
        KIND_DDP_MODEL_MISMATCH,
        "ddp-model-mismatch",
        confidence=0.9,
    ),
    Message(
        "fsdp-training-state",
        "torch FSDP / FSDP2 state check",
        "torch/distributed/fsdp/_common_utils.py _assert_in_training_states and "
        "_fully_shard/_fsdp_state.py (2.2-2.15)",
        "expected to be in states {states} but current state is {state}",
        "an FSDP module was called out of its order (a second forward before backward, a "
        "module used outside the FSDP root's forward, or backward run twice)",
        KIND_FSDP_STATE,
        "fsdp2-state",
        confidence=0.85,
    ),
    Message(
        "dtensor-mixed",
        "torch DTensor dispatch",
        "torch/distributed/tensor/_dispatch.py (2.4-2.15)",
        "got mixed torch.Tensor and DTensor, need to convert all torch.Tensor to DTensor "
        "before calling distributed operators!",
        "a plain tensor met a sharded one: a parameter was resharded (or never sharded) while "
        "another op used it",
        KIND_FSDP_STATE,
        "fsdp2-state",
        confidence=0.8,
    ),
    Message(
        "fsdp-uniform-dtype",
        "torch FSDP2 parameter group",
        "torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py _init_mp_dtypes",
        "FSDP expects uniform original parameter dtype but got {dtypes}",
        "fully_shard groups parameters of several dtypes in one module",
        KIND_FSDP_STATE,
        "fsdp2-state",
        confidence=0.85,
    ),
    # ---------------------------------------------------------------- the kernel and the driver
    Message(
        "xid-hardware",
        "NVIDIA driver Xid",
        "nvidia.ko NVRM Xid lines (dmesg / journalctl -k)",
        "NVRM: Xid (PCI:{bus}): {xid},",
        "the driver reports a GPU hardware fault (Xid 79: the GPU fell off the bus; 48/63/64/"
        "94/95: ECC; 74: NVLink)",
        KIND_GPU_HARDWARE,
        "xid-ecc-errors",
        confidence=0.93,
        rank="none",
        fix="drain the node: `nvidia-smi -q` on it, reset or reboot, and tell the admins",
        choices=(("xid", XID_HARDWARE),),
    ),
    Message(
        "xid-program",
        "NVIDIA driver Xid",
        "nvidia.ko NVRM Xid lines",
        "NVRM: Xid (PCI:{bus}): {xid},",
        "the driver saw a program's kernel fault (Xid 13/31/43: an illegal access or a killed "
        "context)",
        KIND_CUDA_ERROR,
        "cuda-async-error",
        severity=SEVERITY_WARNING,
        confidence=0.55,
        rank="none",
        choices=(("xid", XID_PROGRAM),),
    ),
    Message(
        "off-the-bus",
        "NVIDIA driver",
        "nvidia.ko NVRM (with or without an Xid line)",
        "fallen off the bus",
        "a GPU fell off the PCIe bus: the node lost it until a reset (power, heat, the slot)",
        KIND_GPU_HARDWARE,
        "xid-ecc-errors",
        confidence=0.9,
        rank="none",
    ),
    Message(
        "nvml-handle",
        "nvidia-smi / NVML",
        "nvidia-smi (NVML nvmlDeviceGetHandleByIndex failing)",
        "Unable to determine the device handle for GPU{bus}: {text}",
        "nvidia-smi cannot reach a GPU: it fell off the bus or the driver lost it",
        KIND_GPU_HARDWARE,
        "xid-ecc-errors",
        confidence=0.86,
        rank="none",
    ),
    Message(
        "aer-fatal",
        "Linux PCIe AER",
        "drivers/pci/pcie/aer.c aer_print_error",
        "PCIe Bus Error: severity=Uncorrected (Fatal)",
        "an uncorrected, fatal PCIe error: the link to a device (a GPU, its switch) failed",
        KIND_GPU_HARDWARE,
        "xid-ecc-errors",
        confidence=0.84,
        rank="none",
    ),
    Message(
        "aer-recovery-failed",
        "Linux PCIe AER",
        "drivers/pci/pcie/err.c pcie_do_recovery",
        "AER: device recovery failed",
        "the kernel could not recover a PCIe device after an error",
        KIND_GPU_HARDWARE,
        "xid-ecc-errors",
        confidence=0.84,
        rank="none",
    ),
    Message(
        "aer-nonfatal",
        "Linux PCIe AER",
        "drivers/pci/pcie/aer.c",
        "PCIe Bus Error: severity=Uncorrected (Non-Fatal)",
        "an uncorrected PCIe error the link survived",
        KIND_GPU_HARDWARE,
        "xid-ecc-errors",
        severity=SEVERITY_WARNING,
        confidence=0.5,
        rank="none",
    ),
    Message(
        "aer-corrected",
        "Linux PCIe AER",
        "drivers/pci/pcie/aer.c",
        "PCIe Bus Error: severity={word}, type={word2},",
        "a PCIe error the hardware corrected by itself: worth watching only if it repeats",
        KIND_GPU_HARDWARE,
        "xid-ecc-errors",
        severity=SEVERITY_INFO,
        confidence=0.2,
        rank="none",
        choices=(("word", ("Corrected", "Correctable")),),
    ),
    Message(
        "oom-killer",
        "Linux OOM killer",
        "mm/oom_kill.c __oom_kill_process (kernels 4.x-6.x)",
        "Out of memory: Killed process {pid} ({comm})",
        "the host ran out of memory and the kernel killed a process (SIGKILL)",
        KIND_HOST_OOM,
        "memory-leak",
        confidence=0.6,
        rank="none",
        fix="lower host memory use: fewer DataLoader workers or prefetch, no full dataset in "
        "each rank's RAM; `dmesg -T | grep -i oom` names each kill",
    ),
    Message(
        "oom-killer-cgroup",
        "Linux OOM killer",
        "mm/oom_kill.c (a memory cgroup's limit: containers, SLURM)",
        "Memory cgroup out of memory: Killed process {pid} ({comm})",
        "the job's memory cgroup (container or SLURM allocation) hit its limit and the kernel "
        "killed a process",
        KIND_HOST_OOM,
        "memory-leak",
        confidence=0.62,
        rank="none",
        fix="raise the container's / job's memory limit or use less: the cgroup's "
        "memory.events counts oom_kill",
    ),
    # ---------------------------------------------------------------- Python's faulthandler
    Message(
        "fatal-python-error",
        "CPython faulthandler",
        "Python/pylifecycle.c fatal_error and Modules/faulthandler.c (3.8-3.13)",
        "Fatal Python error: {word}",
        "the process crashed in native code (faulthandler printed each thread's Python stack "
        "at the crash)",
        KIND_NATIVE_CRASH,
        "native-crash",
        confidence=0.74,
        fix="the 'Current thread' stack below it is where it crashed; get a core dump (see "
        "`core-dumps`) for the native frames",
        choices=(
            (
                "word",
                (
                    "Segmentation fault",
                    "Bus error",
                    "Floating point exception",
                    "Illegal instruction",
                ),
            ),
        ),
    ),
    Message(
        "shell-segfault",
        "a shell",
        "bash / sh job status",
        "Segmentation fault (core dumped)",
        "the process died of SIGSEGV",
        KIND_NATIVE_CRASH,
        "native-crash",
        confidence=0.55,
        rank="none",
    ),
    # ---------------------------------------------------------------- NCCL
    Message(
        "nccl-shm-create",
        "NCCL WARN",
        "src/misc/shmutils.cc (2.12-2.30)",
        "Error while creating shared memory segment {path} (size {n})",
        "NCCL could not create its shared-memory segment: /dev/shm is too small (a "
        "container's default 64 MB)",
        KIND_NCCL_ERROR,
        "nccl-init-failure",
        confidence=0.87,
        fix="give the container shared memory: `docker run --shm-size=16g` or `--ipc=host`",
    ),
    Message(
        "nccl-shm-extend",
        "NCCL WARN",
        "src/misc/shmutils.cc",
        "failed to extend {path} to {n} bytes",
        "NCCL could not grow its shared-memory segment: /dev/shm is too small",
        KIND_NCCL_ERROR,
        "nccl-init-failure",
        confidence=0.86,
        fix="give the container shared memory: `docker run --shm-size=16g` or `--ipc=host`",
    ),
    Message(
        "nccl-no-libcuda",
        "NCCL WARN",
        "src/misc/cudawrap.cc (2.12-2.30)",
        "Failed to find CUDA library libcuda.so",
        "NCCL cannot load the driver's libcuda.so (WSL, or a container without the driver mounted)",
        KIND_NCCL_ERROR,
        "nccl-init-failure",
        confidence=0.84,
    ),
    Message(
        "nccl-cuda-failure",
        "NCCL WARN",
        "src/include/checks.h CUDACHECK (2.x)",
        "Cuda failure '{text}'",
        "a CUDA call inside NCCL failed",
        KIND_NCCL_ERROR,
        "nccl-init-failure",
        confidence=0.78,
        choices=(
            (
                "text",
                (
                    "initialization error",
                    "named symbol not found",
                    "invalid device function",
                    "no kernel image is available for execution on the device",
                    "CUDA driver version is insufficient for CUDA runtime version",
                    "invalid device ordinal",
                    "system not yet initialized",
                ),
            ),
        ),
    ),
    Message(
        "nccl-no-interface",
        "NCCL WARN",
        "src/bootstrap.cc / src/misc/socket.cc",
        "Bootstrap : no socket interface found",
        "NCCL found no network interface to bootstrap over",
        KIND_NCCL_INTERFACE,
        "network-interface",
        confidence=0.86,
        fix="set NCCL_SOCKET_IFNAME to the interface the nodes reach each other on (`ip -br a`)",
    ),
    Message(
        "gloo-loopback",
        "gloo TCP transport",
        "third_party/gloo/gloo/transport/tcp/pair.cc (torch 1.x-2.15)",
        "connect [{loopback}]:{port}: Connection refused",
        "gloo connects to a loopback address: this host's name resolves to 127.x (an "
        "/etc/hosts line), so the peers are told to reach it on themselves",
        KIND_GLOO_INTERFACE,
        "network-interface",
        confidence=0.88,
        fix="set GLOO_SOCKET_IFNAME to the interface the nodes reach each other on, or fix "
        "the host name's line in /etc/hosts",
    ),
    Message(
        "nccl-calloc",
        "NCCL WARN",
        "src/include/alloc.h ncclCudaCalloc (2.x)",
        "Failed to CUDA calloc {n} bytes",
        "NCCL could not allocate GPU memory for its buffers",
        KIND_NCCL_CUDA_OOM,
        "cuda-oom-nccl",
        reader="ncclerrors",
    ),
    # ---------------------------------------------------------------- read by other readers
    Message(
        "child-failed-root",
        "torch.distributed.elastic",
        "torch/distributed/elastic/multiprocessing/errors/__init__.py (1.9-2.15; the signal "
        "name after the pid from 2.12)",
        "Root Cause (first observed failure):",
        "torchelastic's summary: which rank ended first and how",
        KIND_CHILD_FAILED,
        None,
        reader="elastic",
    ),
    Message(
        "torch-oom",
        "torch CUDA caching allocator",
        "c10/cuda/CUDACachingAllocator.cpp (1.x wording and 2.x)",
        "CUDA out of memory. Tried to allocate {text}",
        "the GPU's memory is full",
        KIND_CUDA_OOM,
        "cuda-oom",
        reader="memory",
    ),
    Message(
        "deepspeed-min-scale",
        "DeepSpeed loss scaler",
        "deepspeed/runtime/fp16/loss_scaler.py (0.6-0.16)",
        "Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.",
        "fp16 overflowed at every step down to the minimum loss scale",
        KIND_LOSS_SCALE,
        "fp16-loss-scale",
        reader="memory",
    ),
    # ---------------------------------------------------------------- more of torch
    Message(
        "store-based-barrier",
        "torch c10d store-based barrier",
        "torch/distributed/distributed_c10d.py _store_based_barrier (1.8-2.1)",
        "Timed out initializing process group in store based barrier on rank {rank}, for key: "
        "{text} (world_size={n}, worker_count={n2}, timeout={text2})",
        "init_process_group waited for every rank and some never came: worker_count says how "
        "many arrived of world_size",
        KIND_RENDEZVOUS,
        "missing-ranks",
        confidence=0.86,
        rank="none",
        fix="find the ranks that never started or crashed before init_process_group (their "
        "own output), and check WORLD_SIZE against the processes started",
    ),
    Message(
        "rendezvous-timeout",
        "torch.distributed.elastic rendezvous",
        "torch/distributed/elastic/rendezvous/dynamic_rendezvous.py (1.10-2.15)",
        "RendezvousTimeoutError",
        "torchrun's rendezvous timed out: not every node joined (a node that never started, "
        "or cannot reach the rendezvous endpoint)",
        KIND_RENDEZVOUS,
        "rendezvous-hang",
        confidence=0.8,
        rank="none",
    ),
    Message(
        "compute-sanitizer",
        "NVIDIA compute-sanitizer",
        "compute-sanitizer memcheck report (CUDA 11-12)",
        "========= Invalid {scope} {access} of size {n} bytes",
        "compute-sanitizer caught the kernel that reads or writes out of bounds (the line "
        "below it names the kernel and thread)",
        KIND_CUDA_ERROR,
        "cuda-async-error",
        confidence=0.93,
        fix="the report's next lines name the kernel, the thread and the address; its host "
        "backtrace shows the Python op that launched it",
    ),
    # ---------------------------------------------------------------- loss scalers
    Message(
        "fairseq-min-scale",
        "fairseq loss scaler",
        "fairseq/optim/dynamic_loss_scaler.py (0.10-0.12)",
        "Minimum loss scale reached ({float}). Your loss is probably exploding.",
        "fp16 overflowed at every step until fairseq's loss scale reached its minimum",
        KIND_LOSS_SCALE,
        "fp16-loss-scale",
        confidence=0.88,
        fix="lower the learning rate, clip gradients, or train in bf16",
    ),
    # ---------------------------------------------------------------- known and harmless
    Message(
        "pg-not-destroyed",
        "torch ProcessGroupNCCL destructor",
        "torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp (2.4-2.15)",
        "process group has NOT been destroyed before",
        "harmless at exit: the script did not call destroy_process_group() (call it at the "
        "end of main to silence it)",
        KIND_HARMLESS,
        None,
        severity=SEVERITY_INFO,
        confidence=0.05,
    ),
    Message(
        "destroy-not-called",
        "torch ProcessGroupNCCL destructor",
        "torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp (2.6-2.15)",
        "destroy_process_group() was not called before program exit",
        "harmless at exit: the script did not call destroy_process_group()",
        KIND_HARMLESS,
        None,
        severity=SEVERITY_INFO,
        confidence=0.05,
    ),
    Message(
        "scheduler-before-optimizer",
        "torch lr_scheduler",
        "torch/optim/lr_scheduler.py (a GradScaler that skipped the first steps also causes it)",
        "Detected call of `lr_scheduler.step()` before `optimizer.step()`.",
        "harmless with fp16: the grad scaler skipped the first optimizer steps while it found "
        "its scale, so the scheduler ran first",
        KIND_HARMLESS,
        None,
        severity=SEVERITY_INFO,
        confidence=0.05,
    ),
    Message(
        "record-streams-deprecated",
        "torch ProcessGroupNCCL",
        "torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp (2.5-2.15)",
        "TORCH_NCCL_AVOID_RECORD_STREAMS is the default now, this environment variable is "
        "thus deprecated.",
        "harmless: an environment variable that no longer changes anything",
        KIND_HARMLESS,
        None,
        severity=SEVERITY_INFO,
        confidence=0.05,
    ),
    Message(
        "find-unused-none",
        "torch DDP reducer",
        "torch/csrc/distributed/c10d/reducer.cpp (1.8-2.15)",
        "find_unused_parameters=True was specified in DDP constructor, but did not find any "
        "unused parameters in the forward pass.",
        "harmless: find_unused_parameters=True costs a graph traversal per step and found "
        "nothing; turn it off if the model has no unused parameters",
        KIND_HARMLESS,
        None,
        severity=SEVERITY_INFO,
        confidence=0.05,
    ),
    # ---------------------------------------------------------------- NCCL INFO (mldebug.nccl)
    Message(
        "nccl-version",
        "NCCL INFO",
        "src/init.cc showVersion (2.18-2.30)",
        "NCCL version {version}",
        "the NCCL version of the rank (compared across ranks by mldebug nccl)",
        KIND_NCCL_VERSION,
        "nccl-version-mismatch",
        severity=SEVERITY_INFO,
        reader="nccl",
    ),
    Message(
        "nccl-bootstrap",
        "NCCL INFO",
        "src/bootstrap.cc bootstrapNetInit (2.18-2.30)",
        "NCCL INFO Bootstrap : Using {iface}",
        "the interface NCCL bootstraps over (read for the interface checks)",
        KIND_NCCL_NETWORK,
        "network-interface",
        severity=SEVERITY_INFO,
        reader="nccl",
    ),
    Message(
        "nccl-net-socket",
        "NCCL INFO",
        "src/transport/net_socket.cc (2.18-2.30)",
        "NCCL INFO NET/Socket : Using [0]{iface}",
        "NCCL's socket transport and its interfaces",
        KIND_NCCL_NETWORK,
        "network-interface",
        severity=SEVERITY_INFO,
        reader="nccl",
    ),
    Message(
        "nccl-using-network",
        "NCCL INFO",
        "src/init.cc (2.18-2.30)",
        "NCCL INFO Using network {word}",
        "the network transport NCCL chose (IB, Socket, a plugin)",
        KIND_NCCL_NETWORK,
        "nccl-sockets-instead-of-ib",
        severity=SEVERITY_INFO,
        reader="nccl",
    ),
    Message(
        "nccl-init-complete",
        "NCCL INFO",
        "src/init.cc (2.18-2.30)",
        "comm {word} rank {rank} nranks {n} cudaDev {n2} nvmlDev {n3} busId {word2} commId "
        "{word3} - Init COMPLETE",
        "a communicator finished its init on that rank",
        KIND_NCCL_INIT,
        "nccl-init-failure",
        severity=SEVERITY_INFO,
        rank="rank",
        reader="nccl",
    ),
    Message(
        "nccl-channel",
        "NCCL INFO",
        "src/transport.cc (P2P/IPC, P2P/CUMEM, SHM, NET, NVLS; 2.18-2.30)",
        "NCCL INFO Channel {word} : {text} via {word2}",
        "a channel's transport between two ranks",
        KIND_NCCL_NETWORK,
        "broken-p2p",
        severity=SEVERITY_INFO,
        reader="nccl",
    ),
)

BY_ID = {message.id: message for message in CATALOG}
OWN = tuple(message for message in CATALOG if message.reader == "messages")

__all__ = ["BY_ID", "CATALOG", "OWN", "PARTS", "RANK_PREFIX", "Message", "compile_format"]
