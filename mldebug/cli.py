"""`mldebug` command line: dispatch to one module per command.

Each command module has `main(argv: list[str]) -> int` and owns its own argument parser,
so `mldebug run` can pass everything after the script through untouched. Modules are
imported lazily: `mldebug run` must start fast and never import the TUI.
"""

from __future__ import annotations

import importlib
import sys

from mldebug import __version__
from mldebug.errors import EXIT_INTERRUPTED, EXIT_USAGE, MldebugError

COMMANDS = {
    "run": ("mldebug.commands.run", "launch a script on N ranks (or wrap a launcher) with hooks"),
    "dump": (
        "mldebug.commands.dump",
        "every rank's stack, merged, with a verdict (text or --json)",
    ),
    "attach": ("mldebug.commands.attach", "live terminal UI over a running job"),
    "recipes": ("mldebug.commands.recipes", "list the troubleshooting recipes, or print one"),
    "demo": ("mldebug.commands.demo", "start a bundled broken example and show what mldebug finds"),
}

USAGE = """\
usage: mldebug COMMAND [options]

Terminal debugging assistant for multi-rank PyTorch training.

commands:
{commands}

Run `mldebug COMMAND --help` for a command's options.
"""


def _usage() -> str:
    width = max(len(name) for name in COMMANDS)
    lines = [f"  {name:<{width}}  {help_}" for name, (_, help_) in COMMANDS.items()]
    return USAGE.format(commands="\n".join(lines))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0 if argv else EXIT_USAGE
    if argv[0] in ("-V", "--version"):
        print(f"mldebug {__version__}")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"mldebug: unknown command {name!r}\n", file=sys.stderr)
        print(_usage(), file=sys.stderr)
        return EXIT_USAGE
    module = importlib.import_module(COMMANDS[name][0])
    try:
        return module.main(rest)
    except MldebugError as error:
        print(f"mldebug {name}: {error.message}", file=sys.stderr)
        if error.remedy:
            print(error.remedy, file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
