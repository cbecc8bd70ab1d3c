"""Record real CUDA and NCCL artefacts on a GPU machine, for mldebug's tests.

mldebug's CI has no GPU, so the parsers for CUDA memory statistics, out-of-memory errors,
NCCL debug logs, ProcessGroupNCCL watchdog messages and NCCL Flight Recorder dumps are
tested against files this script recorded on a real GPU. Each scenario runs in a child
process with a time limit; everything lands in OUT (default ./gpu-record):

    env.txt                 nvidia-smi, torch, CUDA and NCCL versions
    memory/                 memory_stats() JSON, memory_summary() text, NVML readings,
                            mem_get_info, and the OutOfMemoryError text of a real OOM
    nccl_ok/                one-rank NCCL job: NCCL_DEBUG=INFO log, the Flight Recorder
                            dump (pickle and JSON) after a few collectives
    nccl_timeout/           one-rank NCCL job whose all_reduce never completes (a spinning
                            kernel ahead of it on the stream): stderr with the watchdog's
                            messages, the Flight Recorder dump written on timeout, the NCCL
                            log, py-spy dumps of the main thread spinning at `.item()`, and
                            its CPU use from /proc while it spins
    nccl_duplicate_gpu/     two ranks on one GPU: NCCL's refusal, as each rank saw it
    device_assert/          an out-of-bounds index on the GPU: the asynchronous error text

Usage: python record.py [OUT]
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time

OUT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "gpu-record")


def run(
    name: str, code: str, env: dict | None = None, timeout: float = 90, nproc: int = 1, watch=None
) -> None:
    """Run `code` in `nproc` child processes with their output in OUT/name."""
    folder = os.path.join(OUT, name)
    os.makedirs(folder, exist_ok=True)
    script = os.path.join(folder, "scenario.py")
    with open(script, "w") as handle:
        handle.write(textwrap.dedent(code))
    procs = []
    for rank in range(nproc):
        child_env = {
            **os.environ,
            **(env or {}),
            "OUT": folder,
            "PYTHONUNBUFFERED": "1",
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(nproc),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": "29533",
        }
        out = open(os.path.join(folder, f"stdout.rank{rank}.txt"), "wb")
        err = open(os.path.join(folder, f"stderr.rank{rank}.txt"), "wb")
        procs.append(
            (
                subprocess.Popen([sys.executable, script], env=child_env, stdout=out, stderr=err),
                out,
                err,
            )
        )
    started = time.time()
    if watch is not None:
        try:
            watch(folder, [p for p, _, _ in procs])
        except Exception as error:  # a recording aid failing must not lose the rest
            print(f"{name}: watch failed: {error!r}")
    for proc, out, err in procs:
        try:
            proc.wait(max(1.0, timeout - (time.time() - started)))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        out.close()
        err.close()
    codes = [p.returncode for p, _, _ in procs]
    with open(os.path.join(folder, "exit_codes.json"), "w") as handle:
        json.dump({"exit_codes": codes, "seconds": round(time.time() - started, 1)}, handle)
    print(f"{name}: exit codes {codes} after {time.time() - started:.1f}s", flush=True)


def sh(command: str) -> str:
    try:
        done = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=60)
        return f"$ {command}\n{done.stdout}{done.stderr}\n"
    except Exception as error:
        return f"$ {command}\nfailed: {error!r}\n"


def record_env() -> None:
    code = (
        "import torch, torch.distributed as d; print('torch', torch.__version__); "
        "print('cuda', torch.version.cuda); print('nccl', torch.cuda.nccl.version()); "
        "print('device', torch.cuda.get_device_name(0)); print('fr', "
        "[n for n in dir(torch._C._distributed_c10d) if 'dump' in n or 'trace' in n])"
    )
    text = sh("nvidia-smi") + sh("nvidia-smi -q -d MEMORY,ECC,PERFORMANCE | head -120")
    text += sh(f'{sys.executable} -c "{code}"') + sh("uname -a") + sh("nproc")
    with open(os.path.join(OUT, "env.txt"), "w") as handle:
        handle.write(text)


MEMORY = """
import json, os, torch
out = os.environ["OUT"]
def save(name, value):
    with open(os.path.join(out, name), "w") as f:
        f.write(value if isinstance(value, str) else json.dumps(value, indent=1, default=str))
torch.cuda.memory._record_memory_history(max_entries=200)
x = [torch.randn(1024, 1024, 64, device="cuda") for _ in range(4)]   # 4 x 256 MiB
y = torch.randn(3000, 3000, device="cuda") @ torch.randn(3000, 3000, device="cuda")
del x[1]
small = [torch.empty(1000 + i, device="cuda") for i in range(50)]
torch.cuda.synchronize()
save("memory_stats.json", torch.cuda.memory_stats())
save("memory_summary.txt", torch.cuda.memory_summary())
free, total = torch.cuda.mem_get_info()
save("mem_get_info.json", {"free": free, "total": total,
     "allocated": torch.cuda.memory_allocated(), "reserved": torch.cuda.memory_reserved(),
     "max_allocated": torch.cuda.max_memory_allocated()})
import pickle
snap = torch.cuda.memory._snapshot()
with open(os.path.join(out, "memory_snapshot.pickle"), "wb") as f:
    pickle.dump(snap, f)
try:
    import pynvml
    pynvml.nvmlInit()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    mem = pynvml.nvmlDeviceGetMemoryInfo(h)
    util = pynvml.nvmlDeviceGetUtilizationRates(h)
    procs = pynvml.nvmlDeviceGetComputeRunningProcesses(h)
    save("nvml.json", {"name": str(pynvml.nvmlDeviceGetName(h)), "driver":
         str(pynvml.nvmlSystemGetDriverVersion()), "total": mem.total, "used": mem.used,
         "free": mem.free, "gpu_util": util.gpu, "mem_util": util.memory,
         "temperature": pynvml.nvmlDeviceGetTemperature(h, 0),
         "processes": [{"pid": p.pid, "used": p.usedGpuMemory} for p in procs],
         "my_pid": os.getpid()})
except Exception as error:
    save("nvml_error.txt", repr(error))
try:
    huge = torch.empty(400 * 2**30, dtype=torch.uint8, device="cuda")
except torch.OutOfMemoryError as error:
    save("oom_message.txt", str(error))
    save("oom_memory_stats.json", torch.cuda.memory_stats())
# An OOM with most memory taken by tensors already held (the usual kind).
free, total = torch.cuda.mem_get_info()
hold = []
try:
    while True:
        hold.append(torch.empty(8 * 2**30, dtype=torch.uint8, device="cuda"))
except torch.OutOfMemoryError as error:
    save("oom_full_message.txt", str(error))
del hold
torch.cuda.empty_cache()
print("memory done")
"""

NCCL_OK = """
import json, os, pickle, torch, torch.distributed as dist
out = os.environ["OUT"]
torch.cuda.set_device(0)
dist.init_process_group("nccl", device_id=torch.device("cuda", 0))
t = torch.ones(1 << 20, device="cuda")
for step in range(3):
    dist.all_reduce(t)
    dist.broadcast(t, 0)
dist.all_gather_into_tensor(torch.empty(1 << 20, device="cuda"), t)
dist.barrier()
torch.cuda.synchronize()
c10d = torch._C._distributed_c10d
for name in ("_dump_nccl_trace", "_dump_fr_trace"):
    if hasattr(c10d, name):
        with open(os.path.join(out, "fr_dump.pickle"), "wb") as f:
            f.write(getattr(c10d, name)())
        break
for name in ("_dump_nccl_trace_json", "_dump_fr_trace_json"):
    if hasattr(c10d, name):
        dump = getattr(c10d, name)()
        with open(os.path.join(out, "fr_dump.json"), "wb") as f:
            f.write(dump if isinstance(dump, bytes) else dump.encode())
        break
dist.destroy_process_group()
print("nccl ok done")
"""

NCCL_TIMEOUT = """
import datetime, os, time, torch, torch.distributed as dist
torch.cuda.set_device(0)
dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=15),
                        device_id=torch.device("cuda", 0))
t = torch.ones(1 << 20, device="cuda")
dist.all_reduce(t)
torch.cuda.synchronize()
print("first all_reduce done", flush=True)
def train_step():
    torch.cuda._sleep(400_000_000_000)  # a kernel that spins ~200 s, ahead of the collective
    dist.all_reduce(t)                  # enqueued at once, completes never (in time)
    return t.sum().item()               # the rank waits here, at a sync point
print("loss", train_step(), flush=True)
"""

DUPLICATE_GPU = """
import os, torch, torch.distributed as dist
torch.cuda.set_device(0)
dist.init_process_group("nccl")
t = torch.ones(16, device="cuda")
dist.all_reduce(t)
torch.cuda.synchronize()
print("unexpectedly fine", t[0].item())
"""

DEVICE_ASSERT = """
import torch
x = torch.zeros(10, device="cuda")
index = torch.tensor([100], device="cuda")
y = x[index]
print("queued")
torch.cuda.synchronize()
"""


def watch_spinning(folder: str, procs) -> None:
    """While the timed-out rank spins at .item(): py-spy dumps and CPU use from /proc."""
    pid = procs[0].pid
    deadline = time.time() + 60
    stdout = os.path.join(folder, "stdout.rank0.txt")
    while time.time() < deadline:
        if procs[0].poll() is not None:
            return
        with open(stdout) as handle:
            if "first all_reduce done" in handle.read():
                break
        time.sleep(0.2)
    time.sleep(4)

    def ticks() -> int:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])

    samples = []
    for _ in range(3):
        before, start = ticks(), time.time()
        time.sleep(1.0)
        samples.append((ticks() - before) / os.sysconf("SC_CLK_TCK") / (time.time() - start))
    threads = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as handle:
                name = handle.read().strip()
            with open(f"/proc/{pid}/task/{tid}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            threads[tid] = {
                "comm": name,
                "state": fields[0],
                "ticks": int(fields[11]) + int(fields[12]),
            }
        except OSError:
            pass
    with open(os.path.join(folder, "cpu_while_waiting.json"), "w") as handle:
        json.dump({"cpu_fraction_per_second": samples, "threads": threads}, handle, indent=1)
    pyspy = shutil.which("py-spy")
    if pyspy:
        for args, name in (
            (["--json"], "pyspy.json"),
            (["--json", "--native"], "pyspy_native.json"),
            ([], "pyspy.txt"),
        ):
            done = subprocess.run(
                [pyspy, "dump", "--pid", str(pid), *args], capture_output=True, timeout=60
            )
            with open(os.path.join(folder, name), "wb") as handle:
                handle.write(done.stdout + done.stderr)
    else:
        with open(os.path.join(folder, "pyspy_missing.txt"), "w") as handle:
            handle.write("py-spy not found on PATH\n")


def main() -> None:
    os.makedirs(OUT, exist_ok=True)
    record_env()
    run("memory", MEMORY, timeout=120)
    nccl_env = {
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": "INIT,COLL,NET,ENV,P2P,SHM",
        "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000",
        "TORCH_FR_BUFFER_SIZE": "2000",
    }
    run(
        "nccl_ok",
        NCCL_OK,
        env={**nccl_env, "NCCL_DEBUG_FILE": f"{OUT}/nccl_ok/nccl.%h.%p.log"},
        timeout=120,
    )
    run(
        "nccl_timeout",
        NCCL_TIMEOUT,
        timeout=150,
        watch=watch_spinning,
        env={
            **nccl_env,
            "NCCL_DEBUG_SUBSYS": "INIT,NET",
            "NCCL_DEBUG_FILE": f"{OUT}/nccl_timeout/nccl.%h.%p.log",
            "TORCH_NCCL_DUMP_ON_TIMEOUT": "1",
            "TORCH_NCCL_DEBUG_INFO_TEMP_FILE": f"{OUT}/nccl_timeout/nccl_trace_rank_",
            "TORCH_FR_DUMP_TEMP_FILE": f"{OUT}/nccl_timeout/nccl_trace_rank_",
            "TORCH_NCCL_ENABLE_MONITORING": "1",
            "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": "60",
        },
    )
    run("nccl_duplicate_gpu", DUPLICATE_GPU, nproc=2, timeout=90, env={"NCCL_DEBUG": "WARN"})
    run("device_assert", DEVICE_ASSERT, timeout=60)


if __name__ == "__main__":
    main()
