"""Pure parts of `mldebug run`: environment, argument parsing, exit naming, failure order."""

import signal
import sys
from pathlib import Path

import pytest

from mldebug.agent.identity import ENV_OWNER, claim_rank, is_launcher
from mldebug.commands.run import parse_args
from mldebug.files.rundir import RunPaths
from mldebug.files.safeio import write_json_atomic
from mldebug.launch import env as envs
from mldebug.launch.failures import (
    Failure,
    collect_failures,
    describe_exit,
    exit_code_of,
    format_report,
    order_failures,
    signal_of,
)
from mldebug.rankrules import rank_identity


def test_rank_env_matches_what_torchrun_sets():
    env = envs.rank_env(2, 4, "127.0.0.1", 29511, "run-x")
    assert env["RANK"] == env["LOCAL_RANK"] == env["ROLE_RANK"] == "2"
    assert env["WORLD_SIZE"] == env["LOCAL_WORLD_SIZE"] == env["ROLE_WORLD_SIZE"] == "4"
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("127.0.0.1", "29511")
    assert env["GROUP_RANK"] == "0"
    assert env["TORCHELASTIC_RUN_ID"] == "run-x"


def test_hook_env_puts_hooks_first_and_keeps_user_pythonpath(tmp_path):
    env = envs.hook_env({"PYTHONPATH": "/mine"}, tmp_path, envs.MODE_WRAP)
    first, rest = env["PYTHONPATH"].split(":", 1)
    assert Path(first, "sitecustomize.py").is_file()
    assert rest == "/mine"
    assert env[envs.ENV_ACTIVE] == "1"
    assert Path(env[envs.ENV_PACKAGE_DIR], "agent", "__init__.py").is_file()
    assert env[envs.ENV_MODE] == "wrap"


def test_debug_switches(tmp_path):
    options = envs.DebugOptions(
        cuda_launch_blocking=True, nccl_debug="INFO", distributed_debug=True, flight_recorder=True
    )
    env = envs.debug_env(options, tmp_path)
    assert env["CUDA_LAUNCH_BLOCKING"] == "1"
    assert env["NCCL_DEBUG"] == "INFO"
    assert env["NCCL_DEBUG_FILE"] == f"{tmp_path}/nccl/%h.%p.log"
    assert env["TORCH_DISTRIBUTED_DEBUG"] == "DETAIL"
    assert env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"
    assert envs.debug_env(envs.DebugOptions(), tmp_path) == {}


def test_flight_recorder_names_follow_the_installed_torch(tmp_path):
    assert envs.torch_has_fr_names() is True  # torch 2.13 reads TORCH_FR_* (and warns on old)
    new = envs.flight_recorder_env(tmp_path, True)
    assert new["TORCH_FR_DUMP_TEMP_FILE"] == f"{tmp_path}/fr/rank_"
    assert new["TORCH_FR_BUFFER_SIZE"] != "0"
    assert "TORCH_NCCL_TRACE_BUFFER_SIZE" not in new
    old = envs.flight_recorder_env(tmp_path, False)
    assert old["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"] == f"{tmp_path}/fr/rank_"
    assert "TORCH_FR_BUFFER_SIZE" not in old
    both = envs.flight_recorder_env(tmp_path, None)
    assert both["TORCH_FR_BUFFER_SIZE"] == both["TORCH_NCCL_TRACE_BUFFER_SIZE"]


def test_parse_script_module_and_wrapped_launcher():
    args, mode, command = parse_args(["--nproc-per-node", "2", "train.py", "--nproc-per-node", "9"])
    assert (args.nproc_per_node, mode) == (2, "native")
    assert command == [sys.executable, "train.py", "--nproc-per-node", "9"]
    args, mode, command = parse_args(["--nproc-per-node", "2", "-m", "pkg.train", "--lr", "1"])
    assert command == [sys.executable, "-m", "pkg.train", "--lr", "1"]
    args, mode, command = parse_args(["--nccl-debug", "info", "--", "torchrun", "x.py"])
    assert (mode, command, args.nccl_debug) == ("wrap", ["torchrun", "x.py"], "INFO")
    args, _, _ = parse_args(["--local-ranks-filter", "0,2-3", "t.py"])
    assert args.local_ranks_filter == frozenset({0, 2, 3})


@pytest.mark.parametrize(
    "argv", [[], ["--"], ["--nproc-per-node", "0", "t.py"], ["--ranks", "x", "t.py"]]
)
def test_bad_command_lines_are_usage_errors(argv):
    with pytest.raises(SystemExit) as exit_info:
        parse_args(argv)
    assert exit_info.value.code == 2


def test_exit_codes_and_signal_names():
    assert exit_code_of(3) == 3
    assert exit_code_of(-signal.SIGKILL) == 137
    assert signal_of(139) == signal.SIGSEGV
    assert signal_of(1) is None
    assert describe_exit(3) == "exited with code 3"
    assert describe_exit(-signal.SIGKILL).startswith("killed (SIGKILL): OOM killer?")
    assert describe_exit(-signal.SIGSEGV).startswith("segmentation fault")
    assert describe_exit(-signal.SIGABRT).startswith("aborted (SIGABRT)")
    assert "SIGUSR1" in describe_exit(-signal.SIGUSR1)


def test_failures_are_ordered_by_time_then_rank():
    late, early, tie = (
        Failure(rank=0, time=5.0),
        Failure(rank=3, time=1.0),
        Failure(rank=1, time=1.0),
    )
    assert [f.rank for f in order_failures([late, early, tie])] == [1, 3, 0]


def test_collect_failures_puts_the_earliest_error_first_and_skips_stopped_ranks(tmp_path):
    paths = RunPaths(tmp_path)
    for rank, when, kind in ((0, 20.0, "RuntimeError"), (1, 10.0, "ValueError")):
        paths.rank_dir(rank).mkdir(parents=True)
        write_json_atomic(
            paths.error_file(rank),
            {"type": kind, "message": "m", "time": when, "location": "t.py:3", "host": "h"},
        )
    paths.rank_dir(2).mkdir()
    paths.rank_dir(3).mkdir()
    exits = {0: (1, 21.0), 1: (1, 11.0), 2: (-signal.SIGTERM, 22.0), 3: (-signal.SIGKILL, 15.0)}
    failures = collect_failures(paths, exits, stopped={2})
    assert [(f.rank, f.exit_code) for f in failures] == [(1, 1), (3, 137), (0, 1)]
    assert failures[0].headline == "ValueError: m"
    assert failures[1].headline.startswith("killed (SIGKILL)")
    report = format_report(failures, paths, stopped=[2])
    assert report.startswith("mldebug: root cause (first failure): rank 1 on h: ValueError: m")
    assert "raised at t.py:3" in report
    assert "mldebug recipes rank-crash" in report


def test_rank_identity_and_first_process_claim():
    assert rank_identity({"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "8"}) == (3, 1, 8)
    assert rank_identity({"SLURM_PROCID": "5", "SLURM_NTASKS": "6"}) == (5, None, 6)
    assert rank_identity({"RANK": "x"}) is None
    env = {}
    assert claim_rank(env, 3, 100)
    assert env[ENV_OWNER] == "3:100"
    assert not claim_rank(env, 3, 101)  # a worker of rank 3
    assert claim_rank(env, 3, 100)  # the rank itself after exec
    assert claim_rank(env, 4, 102)  # a rank started by a launcher that is a rank itself


def test_a_run_directory_is_never_reused(tmp_path):
    from mldebug.commands.run import main
    from mldebug.errors import MldebugError

    (tmp_path / "train.py").write_text("")
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "run.json").write_text("{}")
    with pytest.raises(MldebugError, match="already holds a run"):
        main(["--run-dir", str(tmp_path / "old"), str(tmp_path / "train.py")])
    with pytest.raises(MldebugError, match="no such script"):
        main([str(tmp_path / "missing.py")])


def test_job_outcome_exit_codes():
    from mldebug.launch.failures import job_outcome

    crash = Failure(rank=1, time=1.0, exit_code=3, exc_type="ValueError")
    killed = Failure(rank=0, time=2.0, exit_code=137)
    assert job_outcome([], None, None) == (0, "succeeded", [])
    assert job_outcome([crash, killed], None, None) == (3, "failed", [crash, killed])
    assert job_outcome([crash], signal.SIGTERM, None)[:2] == (143, "interrupted")
    assert job_outcome([], 0, None)[:2] == (130, "interrupted")  # stopped from the TUI
    ctrl_c = Failure(rank=0, time=1.0, exc_type="KeyboardInterrupt")
    assert job_outcome([ctrl_c], signal.SIGINT, None)[2] == []
    # wrapped: the launcher's code decides, even when a rank failed and it recovered
    assert job_outcome([crash], None, 1) == (1, "failed", [crash])
    assert job_outcome([crash], None, 0) == (0, "succeeded", [])
    assert job_outcome([], None, -signal.SIGKILL)[:2] == (137, "failed")


def test_wrapped_rank_gone_without_error_or_normal_exit_is_a_failure(tmp_path):
    paths = RunPaths(tmp_path)
    for rank in (0, 1, 2):
        paths.rank_dir(rank).mkdir(parents=True)
    write_json_atomic(paths.exit_file(0), {"time": 1.0})  # shut down normally
    paths.fault_log(2).write_text("Fatal Python error: Segmentation fault\n")
    failures = collect_failures(paths, {}, vanished={0: 1.0, 1: 5.0, 2: 3.0}, hosts={1: "h"})
    assert [(f.rank, f.time) for f in failures] == [(2, 3.0), (1, 5.0)]
    assert failures[0].how.startswith("crashed in native code")
    assert "Segmentation fault" in failures[0].fault_log
    assert failures[1].headline.startswith("ended without a Python exception or a normal exit")
    assert failures[1].host == "h"


def test_launchers_are_not_ranks():
    py = "/usr/bin/python3"
    assert is_launcher([py, "/venv/bin/torchrun", "--nproc-per-node", "2", "train.py"])
    assert is_launcher([py, "-u", "-m", "torch.distributed.run", "train.py"])
    assert is_launcher([py, "/venv/bin/accelerate", "launch", "train.py"])
    assert is_launcher([py, "-m", "deepspeed.launcher.launch", "--world_info=x", "train.py"])
    assert not is_launcher([py, "-u", "train.py", "--launcher", "torchrun"])
    assert not is_launcher([py, "-m", "mypkg.train"])
    assert not is_launcher([py, "-c", "print(1)"])
    assert is_launcher([py, "-W", "ignore", "/venv/bin/torchrun", "train.py"])
    assert is_launcher([py, "-X", "faulthandler", "-um", "torch.distributed.run", "t.py"])
    assert not is_launcher([py, "train.py", "-m", "torchrun"])  # the script's own arguments


def test_a_many_line_message_takes_one_line_of_the_report(tmp_path):
    """The full message is in the traceback; the root-cause line and the "then rank" lines
    keep to one line each (a state_dict error lists every missing key)."""
    message = "Error(s) in loading state_dict for Net:\n\t" + "\n\t".join(
        f'Missing key "layer{i}.weight"' for i in range(300)
    )
    failures = [
        Failure(
            rank=rank,
            time=float(rank),
            exc_type="RuntimeError",
            message=message,
            traceback=f"Traceback (most recent call last):\nRuntimeError: {message}\n",
        )
        for rank in (0, 1)
    ]
    assert failures[0].headline == "RuntimeError: Error(s) in loading state_dict for Net: ..."
    report = format_report(failures, RunPaths(tmp_path)).splitlines()
    assert report[0].endswith(": RuntimeError: Error(s) in loading state_dict for Net: ...")
    assert sum('Missing key "layer299.weight"' in line for line in report) == 1
    assert (
        "  then rank 1 (+1.0s): RuntimeError: Error(s) in loading state_dict for Net: ..." in report
    )
    assert Failure(rank=0, time=0.0, exc_type="StopIteration").headline == "StopIteration"
