"""The project's own error type: a message, a remedy and an exit code.

`cli.main` turns these into one message on stderr and a non-zero exit; anything else
is a bug: one line that says so and exit 70 (the traceback with `mldebug --debug`).
"""

from __future__ import annotations

# Exit codes shared by every command (documented in the README).
EXIT_OK = 0
EXIT_FINDINGS = 1  # dump: the job has problems (a hang, a mismatch, missing ranks)
EXIT_USAGE = 2  # bad command line
EXIT_NO_TARGET = 3  # nothing to look at: no such pid, no job found, several jobs found
EXIT_PERMISSION = 4  # cannot read the target (ptrace, other user)
EXIT_TOOL_MISSING = 5  # py-spy or another required tool is not installed
EXIT_SOFTWARE = 70  # an internal error: a bug in mldebug (sysexits' EX_SOFTWARE)
EXIT_OUTPUT = 74  # the output could not be written: stdout closed, disk full (EX_IOERR)
EXIT_INTERRUPTED = 130  # Ctrl-C: 128 + SIGINT
EXIT_BROKEN_PIPE = 141  # the reader of the output went away (`| head`): 128 + SIGPIPE


class MldebugError(Exception):
    """An expected failure with a message for the user and what to do about it."""

    exit_code = EXIT_USAGE

    def __init__(self, message: str, remedy: str = "", exit_code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.remedy = remedy
        if exit_code is not None:
            self.exit_code = exit_code

    def __str__(self) -> str:
        return f"{self.message}\n{self.remedy}" if self.remedy else self.message


class NoTargetError(MldebugError):
    exit_code = EXIT_NO_TARGET


class PermissionDeniedError(MldebugError):
    exit_code = EXIT_PERMISSION


class ToolMissingError(MldebugError):
    exit_code = EXIT_TOOL_MISSING


class OutputError(MldebugError):
    """The command's output could not be written (stdout closed, disk full)."""

    exit_code = EXIT_OUTPUT


PTRACE_REMEDY = (
    "mldebug reads stacks with ptrace, which this system refused. Any one of these fixes it:\n"
    "  * allow ptrace of your own processes: sudo sysctl kernel.yama.ptrace_scope=0\n"
    "  * in a container, start it with the capability: docker run --cap-add=SYS_PTRACE ...\n"
    "    (Kubernetes: securityContext.capabilities.add: [SYS_PTRACE])\n"
    "  * run mldebug as root, keeping your environment: sudo -E $(which mldebug) ...\n"
    "  * or start the job with `mldebug run`: its ranks then write their own stacks when\n"
    "    ptrace is refused (non-dumpable ranks included)"
)

K8S_PTRACE_REMEDY = (
    "mldebug collect reads stacks with ptrace, which the pods' containers refused. Any one "
    "of these fixes it:\n"
    "  * give the training container the capability: securityContext.capabilities.add: "
    "[SYS_PTRACE]\n"
    "    (the baseline and restricted Pod Security Standards forbid it: ask for an exemption)\n"
    "  * read from an ephemeral debug container that may trace the training one:\n"
    "    kubectl debug -it POD --target=CONTAINER --profile=general --image=IMAGE_WITH_MLDEBUG"
    " -- mldebug dump"
)

PYSPY_REMEDY = "Install it in the environment mldebug runs from: pip install py-spy"
