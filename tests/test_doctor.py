"""`mldebug doctor`, run for real on this machine (no GPU: the GPU checks say SKIP and why),
as an unprivileged user against root's process, and its environment checks."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mldebug.doctor import FAIL, OK, SKIP, STATUSES, WARN, Check, Probe, run_checks
from mldebug.doctor.envvars import check_env
from mldebug.doctor.gpu import holders_check
from mldebug.doctor.system import disk_check, shm_check
from mldebug.recipes import get_recipe

ROOT = Path(__file__).resolve().parent.parent
TEST_USER = "mldebug-doctor-test"


def doctor(*args: str, env: dict | None = None, user: str | None = None, timeout: float = 180):
    argv = [sys.executable, "-m", "mldebug", "doctor", *args]
    if user:
        argv = ["runuser", "-u", user, "--", *argv]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
    return done


def by_name(report: dict) -> dict[str, dict]:
    return {check["name"]: check for check in report["checks"]}


@pytest.fixture(scope="module")
def report():
    done = doctor("--json")
    assert done.returncode in (0, 1), done.stderr
    data = json.loads(done.stdout)
    data["exit"] = done.returncode
    return data


def test_doctor_json_has_every_check_with_status_detail_and_recipe(report):
    checks = by_name(report)
    for name in (
        "ptrace",
        "py-spy",
        "gdb",
        "torch",
        "gpus",
        "gpu-holders",
        "shm",
        "disk",
        "core-dumps",
    ):
        assert name in checks, name
    assert any(name == "env" or name.startswith("env ") for name in checks)
    for check in report["checks"]:
        assert set(check) == {"name", "status", "detail", "recipe"}
        assert check["status"] in STATUSES and check["detail"]
        assert check["recipe"] is None or get_recipe(check["recipe"]) is not None
    failed = any(c["status"] == FAIL for c in report["checks"])
    assert report["exit"] == (1 if failed else 0)


def test_without_a_gpu_the_gpu_checks_skip_and_say_why(report):
    if list(Path("/dev").glob("nvidia[0-9]*")):
        pytest.skip("this machine has NVIDIA devices")
    checks = by_name(report)
    assert checks["gpus"]["status"] == SKIP
    assert "no NVIDIA GPU here" in checks["gpus"]["detail"]
    assert checks["gpu-holders"]["status"] == SKIP
    assert "no /dev/nvidia*" in checks["gpu-holders"]["detail"]


def test_torch_versions_come_from_a_subprocess(report):
    import torch

    torch_check = by_name(report)["torch"]
    assert torch_check["status"] in (OK, WARN)
    assert f"torch {torch.__version__}" in torch_check["detail"]
    # this machine's torch and Python are in the tested range: no warning (README, Supported)
    assert by_name(report)["supported"]["status"] == OK
    # doctor itself never imports torch (it may take 30 s, and must work where it breaks)
    code = (
        "import sys; from mldebug.commands import doctor; from mldebug.doctor import all_probes;"
        "print('torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.strip() == "False"


def test_real_tools_are_found_with_their_versions(report):
    checks = by_name(report)
    if shutil.which("py-spy"):
        assert checks["py-spy"]["status"] == OK and "py-spy" in checks["py-spy"]["detail"]
    if shutil.which("gdb"):
        assert checks["gdb"]["status"] == OK and "GNU gdb" in checks["gdb"]["detail"]


def test_text_output_names_the_recipe_of_a_failure():
    env = dict(os.environ, NCCL_SOCKET_IFNAME="nosuchif0")
    done = doctor(env=env)
    assert done.returncode == 1
    line = next(x for x in done.stdout.splitlines() if "NCCL_SOCKET_IFNAME" in x)
    assert line.startswith("FAIL") and "selects no interface" in line
    assert "read: mldebug recipes nccl-init-failure" in done.stdout


def test_core_dump_settings_follow_the_limit():
    # ulimit -c 0 in the child: doctor warns; unlimited: OK with where cores go.
    code = (
        "import resource,sys; resource.setrlimit(resource.RLIMIT_CORE, ({0}, {0}));"
        "from mldebug.doctor.system import core_check; c = core_check()[0];"
        "print(c.status, c.detail)"
    )
    off = subprocess.run([sys.executable, "-c", code.format(0)], capture_output=True, text=True)
    assert off.stdout.startswith("WARN") and "ulimit -c) 0 bytes" in off.stdout
    pattern = Path("/proc/sys/kernel/core_pattern").read_text().strip()
    hard = subprocess.run(
        [
            sys.executable,
            "-c",
            "import resource; print(resource.getrlimit(resource.RLIMIT_CORE)[1])",
        ],
        capture_output=True,
        text=True,
    ).stdout.strip()
    if hard != "-1":
        pytest.skip(f"the hard core limit here is {hard}")
    on = subprocess.run([sys.executable, "-c", code.format(-1)], capture_output=True, text=True)
    assert on.stdout.startswith("OK") and "unlimited" in on.stdout
    assert (pattern.split()[0].lstrip("|") if pattern.startswith("|") else pattern) in on.stdout


def test_shm_and_disk_report_room(tmp_path):
    shm = shm_check()[0]
    assert shm.status in (OK, WARN) and "/dev/shm" in shm.detail and "free" in shm.detail
    disk = disk_check(tmp_path / "runs" / "not-yet")[0]
    assert disk.status in (OK, WARN, FAIL)
    assert "not created yet" in disk.detail and "inodes free" in disk.detail


def test_a_check_that_hangs_is_cut_at_its_deadline():
    def hangs():
        time.sleep(30)
        return []

    def breaks():
        raise OSError("boom")

    started = time.monotonic()
    checks = run_checks(
        [
            Probe("disk", hangs, "d-state-frozen-fs", timeout=0.5),
            Probe("broken", breaks, None),
            Probe("fine", lambda: [Check("fine", OK, "yes")]),
        ]
    )
    assert time.monotonic() - started < 10
    assert [c.name for c in checks] == ["disk", "broken", "fine"]
    assert checks[0].status == WARN and "did not answer within 0.5 s" in checks[0].detail
    assert checks[0].recipe == "d-state-frozen-fs"
    assert checks[1].status == WARN and "boom" in checks[1].detail


# --- environment variables: the machine's real interfaces, values as users get them wrong ---


def net_dir(tmp_path: Path, names: list[str]) -> Path:
    """A /sys/class/net look-alike (a directory of entries), for interface sets this machine
    does not have."""
    folder = tmp_path / "net"
    folder.mkdir()
    for name in names:
        (folder / name).mkdir()
    return folder


def statuses(checks: list[Check]) -> dict[str, str]:
    return {c.name: c.status for c in checks}


def test_socket_ifname_against_the_interfaces_that_exist(tmp_path):
    net = net_dir(tmp_path, ["lo", "eth0", "ib0", "docker0"])
    none = tmp_path / "no-ib"
    good = ["eth", "=eth0", "^docker,lo", "eth0,ib0"]
    for value in good:
        assert statuses(check_env({"NCCL_SOCKET_IFNAME": value}, net, none)) == {"env": OK}, value
    for value in ["eth9", "=eth", "^eth,ib,docker,lo", "bond0"]:
        checks = check_env({"NCCL_SOCKET_IFNAME": value}, net, none)
        assert statuses(checks) == {"env NCCL_SOCKET_IFNAME": FAIL}, value
        assert "lo, eth0" in checks[0].detail or "docker0" in checks[0].detail
    gloo = check_env({"GLOO_SOCKET_IFNAME": "eth0,eth7"}, net, none)
    assert gloo[0].status == FAIL and "eth7" in gloo[0].detail


def test_variables_that_look_wrong_or_stale(tmp_path):
    net = net_dir(tmp_path, ["lo", "eth0"])
    ib = tmp_path / "ib"
    (ib / "mlx5_0").mkdir(parents=True)
    env = {
        "NCCL_IB_DISABLE": "true",  # NCCL reads it with strtol: 0
        "NCCL_DEBUG": "VERBOSE",
        "NCCL_SOCKET_IFNAM": "eth0",  # typo: ignored by NCCL
        "TORCH_NCCL_TRACE_BUFFER_SIZE": "2000",  # torch warns it is deprecated (recorded)
        "TORCH_NCCL_BLOCKING_WAIT": "maybe",
        "CUDA_VISIBLE_DEVICES": "0,1,1",
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segment:True",
        "NCCL_IB_HCA": "mlx4",
        "NCCL_LL_THRESHOLD": "0",
        "NCCL_DEBUG_FILE": "/nonexistent/dir/nccl.%h.%p.log",
        "SOME_OTHER_TOOL_VAR": "x",
        "TORCH_SOMETHING_ELSE_ENTIRELY": "1",  # not near any known name: not ours to judge
    }
    checks = {c.name: c for c in check_env(env, net, ib)}
    assert "(NCCL reads it as 0)" in checks["env NCCL_IB_DISABLE"].detail
    assert "one of ABORT, INFO, TRACE, VERSION, WARN" in checks["env NCCL_DEBUG"].detail
    assert "did you mean NCCL_SOCKET_IFNAME?" in checks["env NCCL_SOCKET_IFNAM"].detail
    assert "use TORCH_FR_BUFFER_SIZE" in checks["env TORCH_NCCL_TRACE_BUFFER_SIZE"].detail
    assert "0 or 1" in checks["env TORCH_NCCL_BLOCKING_WAIT"].detail
    assert "lists '1' twice" in checks["env CUDA_VISIBLE_DEVICES"].detail
    assert "did you mean expandable_segments?" in checks["env PYTORCH_CUDA_ALLOC_CONF"].detail
    assert checks["env NCCL_IB_HCA"].status == FAIL and "mlx5_0" in checks["env NCCL_IB_HCA"].detail
    assert "ignores it" in checks["env NCCL_LL_THRESHOLD"].detail
    assert "does not exist" in checks["env NCCL_DEBUG_FILE"].detail
    assert not any("SOME_OTHER" in n or "SOMETHING_ELSE" in n for n in checks)
    for check in checks.values():
        assert get_recipe(check.recipe) is not None


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("", "hides every GPU"),
        ("-1", "hides it and every GPU after it"),
        ("0,GPU-8f1e2d3c-aaaa-bbbb,2", ""),
        ("0,gpu1", "CUDA stops at it (hidden after it: none)"),
    ],
)
def test_cuda_visible_devices(value, problem, tmp_path):
    checks = check_env({"CUDA_VISIBLE_DEVICES": value}, net_dir(tmp_path, ["lo"]), tmp_path)
    if problem:
        assert problem in checks[0].detail
    else:
        assert statuses(checks) == {"env": OK}


def test_ib_disabled_where_adapters_exist_points_to_sockets(tmp_path):
    ib = tmp_path / "ib"
    (ib / "mlx5_0").mkdir(parents=True)
    checks = check_env({"NCCL_IB_DISABLE": "1"}, net_dir(tmp_path, ["lo"]), ib)
    assert checks[0].recipe == "nccl-sockets-instead-of-ib" and "mlx5_0" in checks[0].detail


# --- processes holding a GPU -------------------------------------------------------------


def test_an_orphan_holding_a_device_is_reported(tmp_path):
    # No /dev/nvidia* here: a plain file stands for the device node; the processes are real.
    device = tmp_path / "nvidia0"
    device.write_text("")
    orphan_code = (
        "import os, sys, time\n"
        "if os.fork():\n"
        "    os._exit(0)\n"  # the parent goes: the child is re-parented, as a left-behind rank
        f"f = open({str(device)!r})\n"
        "print(os.getpid(), flush=True)\n"
        "time.sleep(60)\n"
    )
    orphan = subprocess.Popen(
        [sys.executable, "-c", orphan_code], stdout=subprocess.PIPE, text=True
    )
    child = subprocess.Popen(["sleep", "60"], stdin=open(device))  # has a live parent: us
    try:
        pid = int(orphan.stdout.readline())
        pattern = re.compile(re.escape(str(device)) + "$")
        checks = holders_check(device=pattern)
        assert checks[0].status == WARN and checks[0].recipe == "zombie-gpu-processes"
        assert f"pid {pid} " in checks[0].detail and "belong to no live job" in checks[0].detail
        assert f"pid {child.pid} " not in checks[0].detail
    finally:
        child.kill()
        child.wait()
        orphan.wait()
        try:
            os.kill(pid, 9)
        except (ProcessLookupError, UnboundLocalError):
            pass


# --- ptrace as an unprivileged user --------------------------------------------------------


def _unprivileged_user() -> tuple[int, int, bool]:
    """(uid, gid, whether the user can start this Python) of a user made for the test."""
    if os.geteuid() != 0:
        pytest.skip("creating a test user needs root (CI runs as root)")
    if not shutil.which("useradd"):
        pytest.skip("useradd is not installed")
    if subprocess.run(["id", TEST_USER], capture_output=True).returncode != 0:
        made = subprocess.run(
            ["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", TEST_USER],
            capture_output=True,
            text=True,
        )
        if made.returncode != 0:
            pytest.skip(f"useradd refused: {made.stderr.strip()}")
    import pwd

    entry = pwd.getpwnam(TEST_USER)
    runs = (
        shutil.which("runuser")
        and subprocess.run(
            ["runuser", "-u", TEST_USER, "--", sys.executable, "-c", "import mldebug"],
            capture_output=True,
            cwd=ROOT,
        ).returncode
        == 0
    )
    return entry.pw_uid, entry.pw_gid, bool(runs)


def doctor_as(uid: int, gid: int, runs: bool, args: list[str], env: dict) -> tuple[int, dict]:
    """`mldebug doctor ARGS` as that user: the real command through runuser where the user
    can start this Python; else (an interpreter under root's 0700 home) this process forks
    and drops to the user's ids before calling the same command's main."""
    if runs:
        done = doctor(*args, env=env, user=TEST_USER)
        return done.returncode, json.loads(done.stdout)
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child's own exit code reports
        code = 99
        try:
            os.close(read)
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)  # drops every capability, CAP_SYS_PTRACE included
            os.environ.clear()
            os.environ.update(env)
            os.dup2(write, 1)
            sys.stdout = open(1, "w", closefd=False)
            from mldebug.cli import main

            code = main(["doctor", *args])
            sys.stdout.flush()
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as out:
        text = out.read()
    _, status = os.waitpid(child, 0)
    return os.waitstatus_to_exitcode(status), json.loads(text)


def test_doctor_as_another_user_explains_why_roots_process_cannot_be_read(tmp_path):
    uid, gid, runs = _unprivileged_user()
    home = tmp_path / "home"
    home.mkdir()
    os.chown(home, uid, gid)
    tmp_path.chmod(0o755)
    target = subprocess.Popen(["sleep", "120"])  # a process of root
    try:
        env = {"PATH": os.environ["PATH"], "HOME": str(home)}
        code, data = doctor_as(uid, gid, runs, ["--json", "--pid", str(target.pid)], env)
        report = by_name(data)
        assert code == 1
        check = report[f"ptrace pid {target.pid}"]
        assert check["status"] == FAIL and check["recipe"] == "ptrace-permission"
        assert f"belongs to uid 0, you are uid {uid}" in check["detail"]
        assert "lacks CAP_SYS_PTRACE" in check["detail"]
        assert "Run mldebug as the user who started the job" in check["detail"]
        # the general check says what the rules are for this user, and that it may still
        # read its own processes
        assert "ptrace_scope" in report["ptrace"]["detail"]
        assert "lacks CAP_SYS_PTRACE" in report["ptrace"]["detail"]
    finally:
        target.kill()
        target.wait()


def test_doctor_as_root_can_read_roots_process():
    if os.geteuid() != 0:
        pytest.skip("needs root")
    target = subprocess.Popen(["sleep", "60"])
    try:
        done = doctor("--json", "--pid", str(target.pid))
        check = by_name(json.loads(done.stdout))[f"ptrace pid {target.pid}"]
        assert check["status"] == OK and "can be read" in check["detail"]
    finally:
        target.kill()
        target.wait()


@settings(max_examples=150, deadline=None)
@given(
    st.dictionaries(
        st.sampled_from(
            [
                "NCCL_SOCKET_IFNAME",
                "GLOO_SOCKET_IFNAME",
                "NCCL_IB_HCA",
                "NCCL_DEBUG",
                "NCCL_DEBUG_SUBSYS",
                "NCCL_IB_DISABLE",
                "CUDA_VISIBLE_DEVICES",
                "PYTORCH_CUDA_ALLOC_CONF",
                "TORCH_NCCL_BLOCKING_WAIT",
                "NCCL_DEBUG_FILE",
                "NCCL_SOCKT_IFNAME",
                "NCCL_\x1b[2J",
            ]
        ),
        st.text(max_size=60),
        max_size=6,
    )
)
def test_environment_checks_never_crash_and_stay_on_one_line(env):
    checks = check_env(env, Path("/sys/class/net"), Path("/sys/class/infiniband"))
    assert checks
    for check in checks:
        assert check.status in STATUSES
        assert not {"\n", "\x1b"} & set(check.detail + check.name)
