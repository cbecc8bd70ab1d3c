"""A loopback sshd for the tests: its own port on 127.0.0.1, a host key and a user key made
for the test in a temporary directory, and the client options that reach it without a
prompt (known host pinned, the test's key only, BatchMode as mldebug adds it anyway).

Nothing of /etc/ssh is used: the daemon reads its own sshd_config. Running it needs root
(sshd changes to the user who logs in) and /run/sshd, its privilege-separation directory.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path


def _find(name: str) -> str | None:
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")


class SshServer:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.proc: subprocess.Popen | None = None
        self.port = 0

    @staticmethod
    def unavailable() -> str | None:
        missing = [n for n in ("sshd", "ssh", "ssh-keygen") if _find(n) is None]
        if missing:
            return "openssh not installed (missing " + ", ".join(missing) + ")"
        if os.geteuid() != 0:
            return "a loopback sshd that logs this user in must be started as root"
        return None

    def _keygen(self, name: str) -> Path:
        key = self.root / name
        subprocess.run(
            [_find("ssh-keygen"), "-q", "-t", "ed25519", "-N", "", "-f", str(key)],
            check=True,
            capture_output=True,
        )
        return key

    def start(self, timeout: float = 30.0) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        host_key, user_key = self._keygen("host_key"), self._keygen("user_key")
        (self.root / "authorized_keys").write_text(Path(f"{user_key}.pub").read_text())
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        public = Path(f"{host_key}.pub").read_text().split()
        (self.root / "known_hosts").write_text(
            f"[localhost]:{self.port},[127.0.0.1]:{self.port} {public[0]} {public[1]}\n"
        )
        config = self.root / "sshd_config"
        config.write_text(
            f"""Port {self.port}
ListenAddress 127.0.0.1
HostKey {host_key}
PidFile {self.root}/sshd.pid
AuthorizedKeysFile {self.root}/authorized_keys
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
StrictModes no
UsePAM no
PrintMotd no
"""
        )
        log = open(self.root / "sshd.log", "ab")
        self.proc = subprocess.Popen(
            [_find("sshd"), "-D", "-e", "-f", str(config)],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd ended: {(self.root / 'sshd.log').read_text()}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError("sshd did not listen")

    def client_options(self) -> list[str]:
        """What `ssh` needs to log in here without asking anything."""
        return [
            f"-p{self.port}",
            f"-i{self.root / 'user_key'}",
            "-oIdentitiesOnly=yes",
            f"-oUserKnownHostsFile={self.root / 'known_hosts'}",
            "-oStrictHostKeyChecking=yes",
        ]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=10)
        self.proc = None
