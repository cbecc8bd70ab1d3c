"""`mldebug` command line: dispatch to one module per command.

Each command module has `main(argv: list[str]) -> int` and owns its own argument parser,
so `mldebug run` can pass everything after the script through untouched. Modules are
imported lazily: `mldebug run` must start fast and never import the TUI.

Every way a command can end has its own exit code (errors.py, README): the project's own
errors print their message and remedy; a reader that goes away (`| head`) ends the command
quietly with 141; Ctrl-C at any moment, the import of the command included, gives 130; any
other exception is a bug: one line that says so (exit 70), the traceback with `--debug`
or MLDEBUG_DEBUG=1.
"""

from __future__ import annotations

import os
import sys

from mldebug import __version__
from mldebug.errors import (
    EXIT_BROKEN_PIPE,
    EXIT_INTERRUPTED,
    EXIT_OUTPUT,
    EXIT_SOFTWARE,
    EXIT_USAGE,
    MldebugError,
)

COMMANDS = {
    "run": ("mldebug.commands.run", "launch a script on N ranks (or wrap a launcher) with hooks"),
    "dump": (
        "mldebug.commands.dump",
        "every rank's stack, merged, with a verdict (text or --json)",
    ),
    "attach": ("mldebug.commands.attach", "live terminal UI over a running job"),
    "collect": ("mldebug.commands.collect", "this node's ranks as one merged JSON document"),
    "recipes": ("mldebug.commands.recipes", "list the troubleshooting recipes, or print one"),
    "doctor": ("mldebug.commands.doctor", "check this machine: ptrace, tools, GPUs, env, disk"),
    "demo": ("mldebug.commands.demo", "start a bundled broken example and show what mldebug finds"),
    "explain": (
        "mldebug.commands.explain",
        "explain a log, a paste (-) or a run directory: findings, their lines, the fix",
    ),
    "check": (
        "mldebug.commands.check",
        "preflight tests on every rank: connectivity, collective bandwidth, matmul TFLOPS",
    ),
    "compare": (
        "mldebug.commands.compare",
        "two runs side by side: step time and its split, what got slower and where",
    ),
    "nccl": (
        "mldebug.commands.nccl",
        "NCCL logs, torch distributed errors and Flight Recorder dumps, compared across ranks",
    ),
}

USAGE = """\
usage: mldebug [--debug] COMMAND [options]

Terminal debugging assistant for multi-rank PyTorch training.

commands:
{commands}

options:
  --debug   show the traceback of an internal error (also MLDEBUG_DEBUG=1)

Run `mldebug COMMAND --help` for a command's options.
"""

# Commands that write to their own files and terminal as a job runs: a closed stdout is
# theirs to deal with. The others have nothing to do without one.
NEEDS_NO_STDOUT = ("run",)


def _usage() -> str:
    width = max(len(name) for name in COMMANDS)
    lines = [f"  {name:<{width}}  {help_}" for name, (_, help_) in COMMANDS.items()]
    return USAGE.format(commands="\n".join(lines))


def _say(text: str) -> None:
    """A message on stderr; nothing when stderr is closed (never onto stdout, which print
    would fall back to)."""
    if sys.stderr is None:
        return
    try:
        print(text, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def _quiet_stdout() -> None:
    """After a broken pipe: point stdout at /dev/null so the interpreter's last flush of
    what is still buffered stays quiet."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):
        pass


def _one_line(error: BaseException) -> str:
    from mldebug.textsafe import one_line

    text = str(error).strip().splitlines()
    first = one_line(text[0][:300]) if text else ""
    return f"{type(error).__name__}: {first}" if first else type(error).__name__


def _debug_wanted(argv: list[str]) -> tuple[bool, list[str]]:
    debug = os.environ.get("MLDEBUG_DEBUG", "") not in ("", "0")
    while argv and argv[0] == "--debug":
        debug, argv = True, argv[1:]
    return debug, argv


def main(argv: list[str] | None = None) -> int:
    debug, argv = _debug_wanted(list(sys.argv[1:] if argv is None else argv))
    name = argv[0] if argv else "mldebug"
    try:
        try:
            code = _dispatch(argv)
        except SystemExit as done:  # argparse: --help, or a bad option (2)
            code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
            if isinstance(done.code, str):
                _say(done.code)
        if sys.stdout is not None:
            sys.stdout.flush()  # a broken pipe shows here, not in the interpreter's last flush
        return code
    except MldebugError as error:
        from mldebug.textsafe import printable

        # A message may quote a path or a file's content: never a terminal escape.
        _say(printable(f"mldebug {name}: {error.message}"))
        if error.remedy:
            _say(printable(error.remedy))
        return error.exit_code
    except BrokenPipeError:
        _quiet_stdout()
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception as error:  # a bug in mldebug: say so in one line, not a traceback
        if debug:
            import traceback

            traceback.print_exc()
        _say(
            f"mldebug {name}: internal error: {_one_line(error)}. This is a bug in mldebug; "
            f"please report it with the traceback that `mldebug --debug {name} ...` shows."
        )
        return EXIT_SOFTWARE


def _dispatch(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help", "help"):
        _write(_usage() + "\n")
        return 0 if argv else EXIT_USAGE
    if argv[0] in ("-V", "--version"):
        _write(f"mldebug {__version__}\n")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        _say(f"mldebug: unknown command {name!r}\n")
        _say(_usage())
        return EXIT_USAGE
    if name not in NEEDS_NO_STDOUT:
        from mldebug.commands.common import stdout_closed

        if stdout_closed():
            _say(f"mldebug {name}: standard output is closed: nothing to write to")
            return EXIT_OUTPUT
    import importlib

    module = importlib.import_module(COMMANDS[name][0])
    return module.main(rest)


def _write(text: str) -> None:
    from mldebug.commands.common import write_out

    write_out(text)


if __name__ == "__main__":
    sys.exit(main())
