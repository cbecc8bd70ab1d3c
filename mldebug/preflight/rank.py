"""The program `mldebug check` runs on every rank: can it join, how fast do collectives go,
how fast does its device multiply matrices. Results are lines of stdout (mldebug/preflight/wire.py).

    python -m mldebug.preflight.rank      # under mldebug check, torchrun, srun...

Rank and world come from the launcher's environment (RANK/WORLD_SIZE/MASTER_ADDR/
MASTER_PORT as torchrun gives them, else SLURM_PROCID/SLURM_NTASKS). The phases:

1. connect: rank 0 hosts a TCPStore; every rank that reaches it within the join timeout
   registers; rank 0 then names the members, and the members form the process group
   (gloo on CPU, nccl on GPUs) and run a barrier, a small all_reduce and a ring of
   send/recv. A rank that cannot reach the store, or joins too late, says why and goes on
   to the compute phase alone: the others are measured without it.
2. collectives: all_reduce, all_gather and reduce_scatter over a few sizes; each op's time
   is the slowest rank's mean (a collective ends when its last rank does), printed by the
   group's first rank. Where the members sit on several hosts, each pair of hosts
   exchanges a buffer between their first ranks, in rounds of disjoint pairs.
3. compute: for a fixed window, matmuls of a few shapes in batches of at least 0.3 s; the
   best batch rate per shape, the best shape per dtype (fp32 on CPU; bf16, fp16, fp32 on a
   GPU). A window of the same length on every rank, started after a barrier, so ranks that
   share a machine compete alike.

It never exits non-zero for what it measured (a launcher would stop the others): a failure
is a record. Only the limits in preflight/wire.py's ENV_* change what it does.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import traceback
from datetime import timedelta

from mldebug.preflight import wire

BATCH_SECONDS = 0.3  # one timed batch of matmuls: long beside a scheduler's period (100 ms)
CHUNK_SECONDS = 0.02  # matmuls between two syncs within a batch
CPU_SHAPES = (256, 512, 1024)
GPU_SHAPES = (2048, 4096, 8192)
CPU_SIZES = (1 << 16, 1 << 20, 1 << 23)
GPU_SIZES = (1 << 20, 1 << 24, 1 << 27, 1 << 28)
OPS = ("all_reduce", "all_gather", "reduce_scatter")
PAIR_BYTES_CPU = 1 << 22
PAIR_BYTES_GPU = 1 << 27
PAIR_ATTEMPTS = 10  # exchanges per pair; the best one counts


def _env_float(name: str, default: float) -> float:
    try:
        value = float(os.environ.get(name, ""))
    except ValueError:
        return default
    return value if 0 < value < 3600 else default


def _env_int(name: str, *fallbacks: str) -> int | None:
    for key in (name, *fallbacks):
        text = os.environ.get(key, "")
        if text.isdigit():
            return int(text)
    return None


def _leading_int(text: str) -> int:
    digits = ""
    for char in text:
        if not char.isdigit():
            break
        digits += char
    return int(digits) if digits else 1


def say(record: dict) -> None:
    print(wire.encode(record), flush=True)


class Check:
    def __init__(self) -> None:
        import torch

        self.torch = torch
        self.rank = _env_int("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK") or 0
        self.world = _env_int("WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE") or 1
        self.local_rank = _env_int("LOCAL_RANK", "SLURM_LOCALID") or 0
        self.local_world = _env_int("LOCAL_WORLD_SIZE", "SLURM_NTASKS_PER_NODE") or _leading_int(
            os.environ.get("SLURM_STEP_TASKS_PER_NODE", "")  # "4" or "4(x2)"
        )
        self.addr = os.environ.get("MASTER_ADDR", "127.0.0.1")
        self.port = _env_int("MASTER_PORT") or 29500
        self.host = socket.gethostname().split(".")[0]
        self.gpu = torch.cuda.is_available()
        self.backend = "nccl" if self.gpu else "gloo"
        if self.gpu:
            torch.cuda.set_device(self.local_rank % torch.cuda.device_count())
            self.device = torch.device("cuda", torch.cuda.current_device())
            self.device_name = torch.cuda.get_device_name(self.device)
        else:
            # One rank per core share: more threads than cores would measure contention.
            threads = max(1, (os.cpu_count() or 1) // max(1, self.local_world))
            torch.set_num_threads(threads)
            self.device = torch.device("cpu")
            self.device_name = f"cpu ({threads} thread{'s' if threads > 1 else ''})"
        self.join_timeout = _env_float(wire.ENV_JOIN_TIMEOUT, 30.0)
        self.op_timeout = _env_float(wire.ENV_OP_TIMEOUT, 30.0)
        self.bandwidth_seconds = _env_float(wire.ENV_BANDWIDTH_SECONDS, 8.0)
        self.compute_seconds = _env_float(wire.ENV_COMPUTE_SECONDS, 4.0)
        self.max_bytes = int(_env_float(wire.ENV_MAX_BYTES, float(1 << 28)))
        self.members: list[int] = []
        self.hosts: list[str] = []
        self.started = time.monotonic()

    def record(self, phase: str, **fields) -> None:
        say({"phase": phase, "rank": self.rank, "host": self.host, **fields})

    def sync(self) -> None:
        if self.gpu:
            self.torch.cuda.synchronize()

    # -- 1. connect --------------------------------------------------------------------

    def connect(self) -> bool:
        dist = self.torch.distributed
        step, begun = "rendezvous", time.monotonic()
        try:
            store = dist.TCPStore(
                self.addr,
                self.port,
                None,
                self.rank == 0,
                timedelta(seconds=self.join_timeout),
                wait_for_workers=False,
            )
            store.set(f"joined/{self.rank}", self.host)
            step = "membership"
            if self.rank == 0:
                self._name_members(store)
            store.wait(["members"], timedelta(seconds=self.join_timeout + 10))
            self.members = json.loads(store.get("members"))
            if self.rank not in self.members:
                raise RuntimeError(
                    f"joined the rendezvous after rank 0 stopped waiting ({self.join_timeout:g} s)"
                )
            step = "init"
            dist.init_process_group(
                self.backend,
                store=dist.PrefixStore("mldebug-check", store),
                rank=self.members.index(self.rank),
                world_size=len(self.members),
                timeout=timedelta(seconds=self.op_timeout),
            )
            timings = {}
            for step, run in (
                ("barrier", self._barrier),
                ("all_reduce", self._small_all_reduce),
                ("ring", self._ring),
            ):
                at = time.monotonic()
                run()
                timings[step] = round(time.monotonic() - at, 6)
            hosts: list[object] = [None] * len(self.members)
            dist.all_gather_object(hosts, self.host)
            self.hosts = [str(h) for h in hosts]
        except Exception as error:  # a record, not a crash: the others go on
            said = f"{type(error).__name__}: {error}"[:2000]
            if step == "rendezvous":
                said += f" ({self._probe()})"
            self.record(
                wire.PHASE_CONNECT,
                ok=False,
                step=step,
                error=said,
                seconds=round(time.monotonic() - begun, 3),
                members=self.members,
            )
            print(f"mldebug check: rank {self.rank} could not join ({step}): {error}",
                  file=sys.stderr, flush=True)  # fmt: skip
            return False
        self.record(
            wire.PHASE_CONNECT,
            ok=True,
            step="ring",
            seconds=round(time.monotonic() - begun, 3),
            members=self.members,
            hosts=self.hosts,
            timings=timings,
        )
        return True

    def _probe(self) -> str:
        """One plain TCP connection to the rendezvous, to tell a refused port (nobody
        listens) from an address that does not answer (a firewall, a wrong host)."""
        try:
            with socket.create_connection((self.addr, self.port), timeout=3):
                return f"a direct connection to {self.addr}:{self.port} succeeds"
        except OSError as error:
            reason = error.strerror or type(error).__name__
            return f"a direct connection to {self.addr}:{self.port}: {reason}"

    def _name_members(self, store) -> None:
        """Rank 0: wait for every rank (or the join timeout), then say who is in."""
        deadline = time.monotonic() + self.join_timeout
        keys = [f"joined/{r}" for r in range(self.world)]
        while time.monotonic() < deadline and not store.check(keys):
            time.sleep(0.05)
        joined = [r for r, key in enumerate(keys) if store.check([key])]
        store.set("members", json.dumps(joined))

    def _barrier(self) -> None:
        self.torch.distributed.barrier()

    def _small_all_reduce(self) -> None:
        torch = self.torch
        value = torch.ones(4, device=self.device)
        torch.distributed.all_reduce(value)
        self.sync()
        if int(value[0].item()) != len(self.members):
            raise RuntimeError(
                f"all_reduce of ones gave {value[0].item()}, not {len(self.members)}"
            )

    def _ring(self) -> None:
        torch, dist = self.torch, self.torch.distributed
        me, n = self.members.index(self.rank), len(self.members)
        if n < 2:
            return
        out = torch.full((4,), float(me), device=self.device)
        got = torch.zeros(4, device=self.device)
        self._exchange([(dist.isend, out, (me + 1) % n), (dist.irecv, got, (me - 1) % n)])
        self.sync()
        if int(got[0].item()) != (me - 1) % n:
            raise RuntimeError(f"ring: got {got[0].item()} from the previous rank")

    def _exchange(self, ops) -> None:
        """Sends and receives posted together (one NCCL group: a send and a receive both
        ways never wait on each other), then waited for."""
        dist = self.torch.distributed
        batch = [dist.P2POp(op, tensor, peer) for op, tensor, peer in ops]
        for request in dist.batch_isend_irecv(batch):
            request.wait()

    # -- 2. collectives ----------------------------------------------------------------

    def collectives(self) -> None:
        n = len(self.members)
        if n < 2:
            return
        sizes = [s for s in (GPU_SIZES if self.gpu else CPU_SIZES) if s <= self.max_bytes]
        budget = self.bandwidth_seconds / (len(OPS) * max(1, len(sizes)))
        spent = 0.0  # agreed on by every rank: sums of the slowest rank's times
        for op in OPS:
            for size in sizes:
                if spent > self.bandwidth_seconds:
                    break
                measured = self._time_op(op, size, n, budget)
                if measured is None:
                    break
                seconds, iterations = measured
                spent += seconds * (iterations + 1)
                if self.rank == self.members[0]:
                    self.record(
                        wire.PHASE_COLLECTIVE,
                        op=op,
                        bytes=size,
                        seconds=seconds,
                        iterations=iterations,
                        ranks=n,
                        backend=self.backend,
                    )
        self.torch.distributed.barrier()

    def _agreed_max(self, value: float) -> float:
        """The largest `value` of all members: every rank decides alike from it."""
        torch, dist = self.torch, self.torch.distributed
        tensor = torch.tensor([value], dtype=torch.float64, device=self.device)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return float(tensor[0].item())

    def _time_op(self, op: str, size: int, n: int, budget: float) -> tuple[float, int] | None:
        """(seconds, iterations) of `op` over `size` bytes: the slowest rank's mean over a
        few iterations. None when this backend lacks the op (said once, by the first rank)."""
        torch, dist = self.torch, self.torch.distributed
        count = max(n, size // 4 // n * n)
        try:
            if op == "all_reduce":
                buffer = torch.ones(count, device=self.device)

                def run() -> None:
                    dist.all_reduce(buffer)
            elif op == "all_gather":
                part = torch.ones(count // n, device=self.device)
                whole = torch.empty(count, device=self.device)

                def run() -> None:
                    dist.all_gather_into_tensor(whole, part)
            else:
                whole = torch.ones(count, device=self.device)
                part = torch.empty(count // n, device=self.device)

                def run() -> None:
                    dist.reduce_scatter_tensor(part, whole)

            at = time.perf_counter()
            run()  # warm-up: the first call sets up what the later ones reuse
            self.sync()
            warm = time.perf_counter() - at
        except (RuntimeError, ValueError, NotImplementedError) as error:
            if self.rank == self.members[0]:
                self.record(wire.PHASE_COLLECTIVE, op=op, bytes=size, error=str(error)[:300])
            return None
        # The same number of iterations on every rank, from the slowest warm-up.
        warm = self._agreed_max(warm)
        iterations = max(3, min(20, int(budget / max(warm, 1e-6))))
        at = time.perf_counter()
        for _ in range(iterations):
            run()
        self.sync()
        mean = (time.perf_counter() - at) / iterations
        return round(self._agreed_max(mean), 9), iterations

    def pairs(self) -> None:
        """Each pair of hosts exchanges a buffer between their first ranks, in rounds of
        disjoint pairs (the circle method), so one slow link stands out."""
        torch, dist = self.torch, self.torch.distributed
        firsts: dict[str, int] = {}
        for index, host in enumerate(self.hosts):
            firsts.setdefault(host, index)
        leaders = list(firsts.values())
        if len(leaders) < 2:
            return
        me = self.members.index(self.rank)
        size = PAIR_BYTES_GPU if self.gpu else PAIR_BYTES_CPU
        out = torch.ones(size // 4, device=self.device)
        got = torch.empty(size // 4, device=self.device)
        ring = leaders + ([None] if len(leaders) % 2 else [])
        for _ in range(len(ring) - 1):
            half = len(ring) // 2
            for a, b in zip(ring[:half], reversed(ring[half:]), strict=True):
                if a is None or b is None or me not in (a, b):
                    continue
                peer = b if me == a else a
                best = None
                for _attempt in range(PAIR_ATTEMPTS):
                    at = time.perf_counter()
                    self._exchange([(dist.isend, out, peer), (dist.irecv, got, peer)])
                    self.sync()
                    took = time.perf_counter() - at
                    best = took if best is None else min(best, took)
                self.record(
                    wire.PHASE_PAIR,
                    hosts=sorted([self.hosts[a], self.hosts[b]]),
                    ranks=sorted([self.members[a], self.members[b]]),
                    bytes=size,
                    seconds=round(best or 0.0, 9),
                )
            ring = [ring[0], ring[-1], *ring[1:-1]]
        dist.barrier()

    # -- 3. compute --------------------------------------------------------------------

    def compute(self, together: bool) -> None:
        torch = self.torch
        if together:
            try:
                self.torch.distributed.barrier()
            except Exception:  # measured alone, then
                pass
        dtypes = ("bfloat16", "float16", "float32") if self.gpu else ("float32",)
        shapes = GPU_SHAPES if self.gpu else CPU_SHAPES
        for name in dtypes:
            dtype = getattr(torch, name)
            per_shape = {s: 0.0 for s in shapes}
            batches = 0
            deadline = time.monotonic() + self.compute_seconds
            matrices = {}
            while time.monotonic() < deadline:
                for size in shapes:
                    if size not in matrices:
                        a = torch.randn(size, size, device=self.device).to(dtype)
                        b = torch.randn(size, size, device=self.device).to(dtype)
                        matrices[size] = (a, b, self._calibrate(a, b))
                    a, b, chunk = matrices[size]
                    # A batch lasts BATCH_SECONDS of wall time whatever the calibration
                    # said: a device throttled or a CPU quota spent shows over a period.
                    at, done = time.perf_counter(), 0
                    while True:
                        for _ in range(chunk):
                            torch.mm(a, b)
                        self.sync()
                        done += chunk
                        took = time.perf_counter() - at
                        if took >= BATCH_SECONDS:
                            break
                    rate = 2.0 * size**3 * done / took / 1e12
                    per_shape[size] = max(per_shape[size], rate)
                    batches += 1
                    if time.monotonic() >= deadline:
                        break
            best = max(per_shape, key=lambda s: per_shape[s])
            self.record(
                wire.PHASE_COMPUTE,
                dtype=name,
                tflops=round(per_shape[best], 6),
                shape=[best, best, best],
                shapes={str(s): round(r, 6) for s, r in per_shape.items()},
                batches=batches,
                seconds=self.compute_seconds,
            )
            matrices.clear()

    def _calibrate(self, a, b) -> int:
        """How many matmuls make a chunk of about CHUNK_SECONDS (one sync per chunk)."""
        self.torch.mm(a, b)
        self.sync()
        at = time.perf_counter()
        self.torch.mm(a, b)
        self.sync()
        one = max(time.perf_counter() - at, 1e-6)
        return max(1, min(10_000, int(CHUNK_SECONDS / one)))

    # -- the whole -----------------------------------------------------------------------

    def run(self) -> None:
        self.record(
            wire.PHASE_START,
            pid=os.getpid(),
            world_size=self.world,
            local_rank=self.local_rank,
            backend=self.backend,
            device=str(self.device),
            device_name=self.device_name,
            gpu=self.gpu,
            torch=self.torch.__version__,
            master=f"{self.addr}:{self.port}",
        )
        joined = self.connect()
        if joined:
            for name, phase in (("collectives", self.collectives), ("pairs", self.pairs)):
                try:
                    phase()
                except Exception as error:
                    self.record(wire.PHASE_CONNECT, ok=False, step=name, error=str(error)[:2000],
                                members=self.members)  # fmt: skip
                    joined = False
                    break
        self.compute(together=joined)
        self.record(wire.PHASE_END, seconds=round(time.monotonic() - self.started, 3))
        if joined:
            try:
                self.torch.distributed.destroy_process_group()
            except Exception:
                pass


def main() -> int:
    import warnings

    warnings.filterwarnings("ignore", message=".*is deprecated.*", category=FutureWarning)
    try:
        Check().run()
    except Exception as error:  # the front end reads this rank's stderr for the cause
        traceback.print_exc()
        print(f"mldebug check: rank program failed: {error}", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
