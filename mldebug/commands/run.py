"""`mldebug run`: start a script on N ranks (like torchrun), or wrap any launcher, with hooks.

mldebug run [options] SCRIPT [ARGS...]
mldebug run [options] -m MODULE [ARGS...]
mldebug run [options] -- COMMAND...     (torchrun, accelerate, deepspeed, srun...)
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from mldebug.errors import MldebugError
from mldebug.files.rundir import MANIFEST, create_run_dir
from mldebug.files.safeio import UntrustedDirError, make_private_dir
from mldebug.launch import env as envs
from mldebug.launch.output import Console, RankFilter
from mldebug.launch.spec import LaunchSpec
from mldebug.launch.supervisor import Supervisor
from mldebug.ranges import parse_ranks

if TYPE_CHECKING:
    from types import FrameType

DESCRIPTION = """\
Start SCRIPT on N ranks with the environment torchrun gives them (RANK, WORLD_SIZE,
MASTER_ADDR...), or wrap a launcher after `--`. Every line a rank writes is shown with a
[host:rank] prefix and kept in the run directory; when a rank dies, mldebug names the root
cause (rank, exception, file:line) and stops the others.
"""

EPILOG = """\
examples:
  mldebug run --nproc-per-node 2 train.py --epochs 1
  mldebug run --nproc-per-node 4 -m mypkg.train
  mldebug run --nccl-debug INFO -- torchrun --nproc-per-node 8 train.py
"""


def _hang_report(snapshot, notes):
    """The views' report of the hang watchdog's look (imported when a hang is looked at)."""
    from mldebug.report.hang import hang_report

    return hang_report(snapshot, notes)


def _ranks(text: str) -> frozenset[int]:
    try:
        return frozenset(parse_ranks(text))
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{error} (expected a list like 0,2-3)") from None


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 1 <= value <= 7 * 24 * 3600:
        raise argparse.ArgumentTypeError("must be between 1 second and a week")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mldebug run",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    launch = parser.add_argument_group("launching")
    launch.add_argument(
        "--nproc-per-node",
        "--nproc_per_node",
        type=_positive,
        default=1,
        metavar="N",
        help="number of ranks to start (default 1)",
    )
    launch.add_argument(
        "--master-port",
        "--master_port",
        type=int,
        metavar="PORT",
        help="rendezvous port (default: a free one)",
    )
    launch.add_argument(
        "--master-addr",
        "--master_addr",
        default="127.0.0.1",
        metavar="ADDR",
        help="rendezvous address (default 127.0.0.1)",
    )
    launch.add_argument(
        "--run-dir",
        metavar="DIR",
        help="where to keep output and reports (default: a new directory "
        "under ~/.local/state/mldebug/runs)",
    )
    launch.add_argument(
        "--grace-period",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="how long ranks get to exit after SIGTERM before SIGKILL (default 5)",
    )
    out = parser.add_argument_group("output")
    out.add_argument(
        "--local-ranks-filter",
        "--local_ranks_filter",
        type=_ranks,
        metavar="RANKS",
        help="show only these local ranks on the console, e.g. 0,2-3 "
        "(all output is still kept in the run directory)",
    )
    out.add_argument(
        "--ranks", type=_ranks, metavar="RANKS", help="show only these global ranks on the console"
    )
    out.add_argument(
        "--no-prefix", action="store_true", help="do not prefix console lines with [host:rank]"
    )
    out.add_argument(
        "--tui",
        action="store_true",
        help="start the job and watch it in the terminal UI (output goes to files)",
    )
    watch = parser.add_argument_group("hangs")
    watch.add_argument(
        "--hang-timeout",
        type=_seconds,
        metavar="SECONDS",
        help="when no rank's step or collective count (or, before the first, output) moved "
        "for this long, write a full dump to <run>/reports/hang-<time>.txt and .json and "
        "print its verdict (default: off)",
    )
    watch.add_argument(
        "--on-hang",
        choices=["keep", "stop"],
        default="keep",
        help="after the hang report: keep the job running (default), or stop it (exit code 124)",
    )
    watch.add_argument(
        "--core-dumps",
        action="store_true",
        help="let ranks dump core (RLIMIT_CORE raised); a rank killed by SIGSEGV/SIGABRT has "
        "its core moved to <run>/cores/ and named in the first-failure report (read it: "
        "mldebug dump --core FILE); a core_pattern piped to systemd-coredump or apport is "
        "explained, with the command that gets the file",
    )
    debug = parser.add_argument_group("debugging switches (environment of the ranks)")
    debug.add_argument(
        "--cuda-launch-blocking",
        action="store_true",
        help="CUDA_LAUNCH_BLOCKING=1: errors point at the right kernel, but "
        "every kernel runs one after another (slow)",
    )
    debug.add_argument(
        "--nccl-debug",
        metavar="LEVEL",
        type=str.upper,
        choices=["VERSION", "WARN", "INFO", "TRACE"],
        help="NCCL_DEBUG=LEVEL, written to <run>/nccl/<host>.<pid>.log",
    )
    debug.add_argument(
        "--distributed-debug",
        action="store_true",
        help="TORCH_DISTRIBUTED_DEBUG=DETAIL: checks collectives match across ranks",
    )
    debug.add_argument(
        "--flight-recorder",
        action="store_true",
        help="keep torch's Flight Recorder of each rank's last collectives (NCCL and gloo); "
        "each rank writes it to <run>/fr/rank_<rank> when the hang watchdog fires, on "
        "`touch <run>/fr/request`, and (NCCL) on a watchdog timeout",
    )
    # --detect-anomaly[=torch|stop]: three flags, so that `--detect-anomaly SCRIPT` never
    # takes the script for the option's value (argparse matches an option string whole).
    debug.add_argument(
        "--detect-anomaly",
        dest="detect_anomaly",
        action="store_const",
        const="on",
        help="name the first module whose output, input, weight or gradient goes NaN/Inf "
        "(rank, step, module, line; one device sync per step); --detect-anomaly=stop: "
        "raise at the first one; --detect-anomaly=torch: also torch's anomaly mode (slow)",
    )
    for mode in ("torch", "stop"):
        debug.add_argument(
            f"--detect-anomaly={mode}",
            dest="detect_anomaly",
            action="store_const",
            const=mode,
            help=argparse.SUPPRESS,
        )
    # --tiny-model[=SPEC]: the SPEC only after `=` (see _tiny_model_spec), so that
    # `--tiny-model train.py` never takes the script for it.
    debug.add_argument(
        "--tiny-model",
        dest="tiny_model",
        action="store_const",
        const="",
        help="every Hugging Face from_pretrained builds a tiny model of the same architecture "
        "with random weights, offline; --tiny-model=SPEC sets it: hidden=64,layers=2,heads=4,"
        "kv_heads=N,intermediate=N,experts=4,vocab=N|keep,fallback=error|load "
        "(docs/tiny-model.md)",
    )
    parser.add_argument(
        "-m", dest="module", metavar="MODULE", help="run a module as a script (as python -m)"
    )
    parser.add_argument(
        "command",
        nargs=argparse.REMAINDER,
        help="SCRIPT [ARGS...], or -- COMMAND... to wrap a launcher",
    )
    return parser


TINY_MODEL_EQ = "--tiny-model="


def _tiny_model_spec(args: argparse.Namespace, argv: list[str]) -> None:
    """args.tiny_model from `--tiny-model=SPEC` among mldebug's own options (before the
    script), checked here: a bad SPEC is one line and exit 2."""
    own = argv[: len(argv) - len(args.command)]
    for token in own:
        if token.startswith(TINY_MODEL_EQ):
            args.tiny_model = token[len(TINY_MODEL_EQ) :]
    args.command = argv[len(own) :]
    if args.tiny_model is None:
        return
    from mldebug.tiny.spec import parse_spec

    try:
        args.tiny_model = parse_spec(args.tiny_model).to_text()
    except ValueError as error:
        raise MldebugError(f"--tiny-model: {error}") from None


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, str, list[str]]:
    """Options, mode and the command to start. Arguments after the script are the script's."""
    parser = build_parser()
    # argparse takes `--tiny-model=SPEC` only as `--tiny-model`; the SPEC is read back after.
    original, argv = argv, ["--tiny-model" if t.startswith(TINY_MODEL_EQ) else t for t in argv]
    # `-m MODULE` ends mldebug's options like a script name does: the rest is the module's.
    for index, token in enumerate(argv):
        if token == "-m" and index + 1 < len(argv):
            args = parser.parse_args(argv[:index])
            if not args.command:
                _tiny_model_spec(args, original[:index])
                return args, envs.MODE_NATIVE, [sys.executable, "-m", *original[index + 1 :]]
            break
    args = parser.parse_args(argv)
    _tiny_model_spec(args, original)
    command = list(args.command)
    if args.module:
        return args, envs.MODE_NATIVE, [sys.executable, "-m", args.module, *command]
    if command[:1] == ["--"]:
        if len(command) == 1:
            parser.error("nothing to run after --")
        if args.nproc_per_node != 1:
            parser.error("--nproc-per-node applies to SCRIPT; give it to the wrapped launcher")
        return args, envs.MODE_WRAP, command[1:]
    if not command:
        parser.error("give a SCRIPT to run, -m MODULE, or -- COMMAND to wrap a launcher")
    return args, envs.MODE_NATIVE, [sys.executable, *command]


def _attach_function() -> Callable[..., int]:  # commands/attach.py's attach_to_run
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise MldebugError(
            "--tui needs a terminal (stdin and stdout are not one)",
            "Run it in a terminal, or drop --tui to get the ranks' output as lines.",
        )
    try:
        from mldebug.commands.attach import attach_to_run
    except ImportError as error:
        raise MldebugError(
            f"the terminal UI is not available in this installation ({error})",
            "Run without --tui; `mldebug dump` shows the job's state from another terminal.",
        ) from None
    return attach_to_run


def main(argv: list[str]) -> int:
    args, mode, command = parse_args(argv)
    if mode == envs.MODE_NATIVE and command[1] != "-m" and not os.path.isfile(command[1]):
        raise MldebugError(
            f"no such script: {command[1]}",
            "Give the path of a Python file, -m MODULE, or -- COMMAND to wrap a launcher.",
        )
    attach = _attach_function() if args.tui else None
    options = envs.DebugOptions(
        cuda_launch_blocking=args.cuda_launch_blocking,
        nccl_debug=args.nccl_debug,
        distributed_debug=args.distributed_debug,
        flight_recorder=args.flight_recorder,
        detect_anomaly=args.detect_anomaly,
        tiny_model=args.tiny_model,
    )
    if args.run_dir and os.path.exists(os.path.join(args.run_dir, MANIFEST)):
        raise MldebugError(
            f"{args.run_dir} already holds a run",
            "Give --run-dir a new directory: the old run's files would mix with the new one's.",
        )
    try:
        paths = create_run_dir(args.run_dir)
    except UntrustedDirError as error:
        raise MldebugError(
            f"refusing the run directory {error.filename}: {error.strerror}",
            "A run directory must be yours and writable by you only (chmod 700 DIR), or "
            "give --run-dir a path that does not exist yet.",
        ) from None
    except OSError as error:
        raise MldebugError(
            f"cannot create the run directory: {error}", "Pass a writable --run-dir."
        ) from None
    if options.nccl_debug:
        make_private_dir(paths.nccl_dir)
    if options.flight_recorder:
        make_private_dir(paths.root / "fr")
    console = Console()
    console.message(f"mldebug: run directory {paths.root}")
    if options.flight_recorder:
        fr = paths.root / "fr"
        when = " and when the hang watchdog fires" if args.hang_timeout else ""
        console.message(
            f"mldebug: Flight Recorder: each rank writes {fr}/rank_<rank> on "
            f"`touch {fr}/request`{when}"
        )
    if options.cuda_launch_blocking:
        console.message(
            "mldebug: CUDA_LAUNCH_BLOCKING=1 serialises every CUDA kernel: errors point at "
            "the right line, but the job runs much slower"
        )
    spec = LaunchSpec(
        paths=paths,
        command=command,
        mode=mode,
        nproc=args.nproc_per_node,
        master_addr=args.master_addr,
        master_port=args.master_port,
        options=options,
        grace_period=args.grace_period,
        console=None if args.tui else console,
        rank_filter=RankFilter(ranks=args.ranks, local_ranks=args.local_ranks_filter),
        prefix=not args.no_prefix,
        argv=["mldebug", "run", *argv],
        hang_timeout=args.hang_timeout,
        render=_hang_report,
        on_hang=args.on_hang,
        core_dumps=args.core_dumps,
    )
    # A file past the size limit (ulimit -f) gives mldebug EFBIG, not death by SIGXFSZ; the
    # job's processes get the default back (Popen's restore_signals).
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    try:
        return _supervise(Supervisor(spec), attach, console)
    finally:
        signal.signal(signal.SIGXFSZ, previous)


def _supervise(supervisor: Supervisor, attach: Callable[..., int] | None, console: Console) -> int:
    handled = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {signum: signal.getsignal(signum) for signum in handled}

    view = None
    if attach is not None:  # the live view must not outlive the job it watches
        from mldebug.commands.attach import LiveView

        view = LiveView()

    def on_signal(number: int, _frame: FrameType | None) -> None:
        supervisor.stop(number)
        if view is not None:
            view.close()

    for signum in handled:
        signal.signal(signum, on_signal)
    try:
        try:
            supervisor.start()
        except OSError as error:
            raise MldebugError(
                f"cannot start {supervisor.spec.command[0]}: {error}",
                "Check the command and that it is executable.",
            ) from None
        if attach is not None:
            attach(supervisor.paths.root, supervisor.stop, view=view)
            if not supervisor.stopping and not supervisor.done:
                # The user left the UI but chose to keep the job: show its output from here.
                console.message("mldebug: the job keeps running; Ctrl-C stops it")
                supervisor.show_output(console)
        code = supervisor.wait()
        assert code is not None  # wait() without a timeout returns once the job is over
        for text in supervisor.unshown:  # e.g. the root cause, found while the UI was up
            console.message(text)
        return code
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
