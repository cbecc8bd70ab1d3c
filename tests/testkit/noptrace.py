"""Run commands as a user who may not ptrace: the tests of stacks read without ptrace.

Where the test user (made with useradd, as tests/test_doctor.py does) can start this Python,
commands run as that user through runuser. Where it cannot (the interpreter lives under
root's 0700 home, as in CI), they run as root with every capability dropped by setpriv,
the bounding set included, so no exec gets one back: CAP_SYS_PTRACE is gone, which is what
a container started without it, or a restricted Kubernetes pod, gives. Either way py-spy is
refused by a non-dumpable process, and so is reading its /proc/PID/environ.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TEST_USER = "mldebug-doctor-test"  # the user tests/test_doctor.py makes
SETPRIV = ["setpriv", "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--"]


@dataclass(frozen=True)
class Restricted:
    prefix: tuple[str, ...]  # put before a command to run it without ptrace rights
    uid: int
    gid: int
    who: str  # said in assertion messages

    def own(self, path: Path) -> None:
        """Give `path` (a folder the commands write in) to the user they run as."""
        os.chown(path, self.uid, self.gid)


def _user_runs_python() -> tuple[int, int] | None:
    if not shutil.which("useradd") or not shutil.which("runuser"):
        return None
    if subprocess.run(["id", TEST_USER], capture_output=True).returncode != 0:
        made = subprocess.run(
            ["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", TEST_USER],
            capture_output=True,
        )
        if made.returncode != 0:
            return None
    probe = ["runuser", "-u", TEST_USER, "--", sys.executable, "-c", "import mldebug, torch"]
    if subprocess.run(probe, capture_output=True, cwd=ROOT).returncode != 0:
        return None
    entry = pwd.getpwnam(TEST_USER)
    return entry.pw_uid, entry.pw_gid


def restricted() -> Restricted:
    """How to run a command without ptrace rights here (skips where neither way exists)."""
    if os.geteuid() != 0:
        pytest.skip("dropping ptrace rights for the test needs root (CI runs as root)")
    user = _user_runs_python()
    if user is not None:
        return Restricted(("runuser", "-u", TEST_USER, "--"), *user, who=TEST_USER)
    if not shutil.which("setpriv"):
        pytest.skip("neither a test user that can start this Python nor setpriv")
    return Restricted(tuple(SETPRIV), 0, 0, who="root without capabilities")


def py_spy_refused(restricted: Restricted, pid: int) -> bool:
    """Does the real py-spy, run as `restricted`, fail to read `pid`?"""
    pyspy = os.path.join(os.path.dirname(sys.executable), "py-spy")
    done = subprocess.run(
        [*restricted.prefix, pyspy, "dump", "--pid", str(pid)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.returncode != 0
