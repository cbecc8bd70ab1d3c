"""A one-node SLURM cluster for the tests: munged, slurmctld and slurmd of Debian's
`slurm-wlm`/`munge`, all in one temporary directory, on ports nobody else uses.

Nothing of /etc is touched: every daemon and every client finds the cluster through
SLURM_CONF (set by `env()`), and munge through its own socket named in slurm.conf. The node
is this machine, with its own CPU count and memory; processes are tracked by
proctrack/linuxproc and no cgroup plugin is loaded, so it runs in a container too.
`SlurmCluster.unavailable()` says why it cannot run here (then the tests skip, except
under CI=1, where .ci/run has installed the packages and they must run).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "srun", "squeue", "scontrol", "scancel")


def _find(name: str) -> str | None:
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _memory_mb() -> int:
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    return 1024


class SlurmCluster:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.node = socket.gethostname().split(".")[0]
        self.conf = self.root / "slurm.conf"
        self.procs: list[subprocess.Popen] = []

    @staticmethod
    def unavailable() -> str | None:
        """Why the cluster cannot run here, or None."""
        missing = [n for n in (*DAEMONS, *CLIENTS, "mungekey") if _find(n) is None]
        if missing:
            return "SLURM/munge not installed (missing " + ", ".join(missing) + ")"
        if os.geteuid() != 0:
            return "slurmd must run as root to start tasks (the tests run as another user)"
        return None

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["SLURM_CONF"] = str(self.conf)
        for name in list(env):  # a test run inside an allocation must not lend its job
            if name.startswith("SLURM_") and name != "SLURM_CONF":
                del env[name]
        return env

    def _write_conf(self) -> None:
        cpus = os.cpu_count() or 1
        r = self.root
        self.conf.write_text(
            f"""ClusterName=mldebugtest
SlurmctldHost={self.node}(127.0.0.1)
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
AuthType=auth/munge
AuthInfo=socket={r}/munge.socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation={r}/state
SlurmdSpoolDir={r}/spool
SlurmctldPidFile={r}/slurmctld.pid
SlurmdPidFile={r}/slurmd.pid
SlurmctldLogFile={r}/slurmctld.log
SlurmdLogFile={r}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SlurmdTimeout=300
InactiveLimit=0
KillWait=5
NodeName={self.node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory={_memory_mb() - 512} State=UNKNOWN
PartitionName=debug Nodes={self.node} Default=YES MaxTime=INFINITE State=UP
"""
        )

    def start(self, timeout: float = 60.0) -> None:
        r = self.root
        for sub in ("state", "spool"):
            (r / sub).mkdir(parents=True, exist_ok=True)
        key = r / "munge.key"
        subprocess.run([_find("mungekey"), "-c", "-k", str(key)], check=True, capture_output=True)
        os.chmod(key, 0o600)
        self._write_conf()
        self._spawn(
            _find("munged"),
            "-F",
            "-f",
            f"--socket={r}/munge.socket",
            f"--key-file={key}",
            f"--pid-file={r}/munged.pid",
            f"--log-file={r}/munged.log",
            f"--seed-file={r}/munged.seed",
        )
        self._wait(lambda: (r / "munge.socket").exists(), timeout, "munged")
        self._spawn(_find("slurmctld"), "-D", "-i", "-f", str(self.conf))
        self._spawn(_find("slurmd"), "-D", "-N", self.node, "-f", str(self.conf))
        self._wait(self._node_ready, timeout, "slurmd to register")

    def _spawn(self, *argv: str) -> None:
        log = open(self.root / f"{Path(argv[0]).name}.out", "ab")
        self.procs.append(
            subprocess.Popen(
                argv, env=self.env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        )
        log.close()

    def _node_ready(self) -> bool:
        done = self.run("sinfo", "-h", "-N", "-o", "%T", check=False)
        return done.returncode == 0 and done.stdout.strip() in ("idle", "mixed", "allocated")

    def _wait(self, ready, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ready():
                return
            for proc in self.procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"{proc.args[0]} ended ({proc.returncode}): {self.logs()}")
            time.sleep(0.3)
        raise RuntimeError(f"timed out waiting for {what}: {self.logs()}")

    def logs(self) -> str:
        parts = []
        for name in ("slurmctld.log", "slurmd.log", "munged.log", "slurmd.out", "slurmctld.out"):
            path = self.root / name
            if path.exists():
                parts.append(f"--- {name}\n" + path.read_text(errors="replace")[-2000:])
        return "\n".join(parts)

    def run(self, *argv: str, check: bool = True, timeout: float = 60.0):
        return subprocess.run(
            argv, env=self.env(), capture_output=True, text=True, check=check, timeout=timeout
        )

    def _ours(self) -> list[int]:
        """Processes that carry this cluster's SLURM_CONF: the slurmstepd of its steps and
        the tasks they run (slurmd hands its environment down), whoever their parent."""
        mark = f"SLURM_CONF={self.conf}".encode()
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit() and int(entry) != os.getpid():
                try:
                    with open(f"/proc/{entry}/environ", "rb") as environ:
                        if mark in environ.read().split(b"\0"):
                            found.append(int(entry))
                except OSError:
                    continue
        return found

    def stop(self) -> None:
        # Cancel the jobs and wait for them to end before the daemons go: a slurmstepd
        # whose slurmd is gone outlives it.
        self.run("scancel", "--full", "--user=root", check=False)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            queue = self.run("squeue", "-h", "-o", "%i", check=False)
            if queue.returncode != 0 or not queue.stdout.strip():
                break
            time.sleep(0.5)
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in reversed(self.procs):
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)
        self.procs.clear()
        for pid in self._ours():  # what is left of its steps, by pid
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
