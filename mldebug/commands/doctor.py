"""`mldebug doctor [--json] [--pid PID]`: check this machine before or during a job.

Each check says OK, WARN, FAIL or SKIP, what it saw, and the recipe to read. Exit 1 when
any check failed, else 0. Every check is bounded in time (mldebug.doctor.run_checks).
"""

from __future__ import annotations

import argparse
import json

from mldebug.commands.common import add_json, command_parser, pid, write_out
from mldebug.doctor import FAIL, all_probes, run_checks
from mldebug.errors import EXIT_FINDINGS, EXIT_OK
from mldebug.textsafe import printable

EPILOG = """\
checks: ptrace (may mldebug read your processes, and why not), py-spy, gdb, torch / CUDA /
  NCCL versions (torch imported in a subprocess), GPUs (NVML or nvidia-smi), processes
  holding GPUs that belong to no live job, NCCL_* / TORCH_* / CUDA_* variables that look
  wrong or stale, /dev/shm, free disk and inodes of the run directory, core dump settings.

exit status:
  0    no check failed (warnings and skips allowed)
  1    at least one check failed
  2    bad command line
"""


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser(
        "doctor", "Check this machine for what breaks or hides a multi-rank job.", EPILOG
    )
    add_json(parser, "print the checks as JSON")
    parser.add_argument(
        "-p",
        "--pid",
        type=pid,
        metavar="PID",
        help="also check that this process (a rank) can be read by this user",
    )
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    checks = run_checks(all_probes(args.pid))
    if args.json:
        write_out(json.dumps({"checks": [c.to_json() for c in checks]}, indent=2) + "\n")
    else:
        width = max(len(c.name) for c in checks)
        lines = []
        for check in checks:
            line = f"{check.status:<4}  {printable(check.name):<{width}}  {printable(check.detail)}"
            if check.recipe and check.status in ("WARN", "FAIL"):
                line += f"\n{'':<6}{'':<{width}}  read: mldebug recipes {check.recipe}"
            lines.append(line)
        write_out("\n".join(lines) + "\n")
    return EXIT_FINDINGS if any(c.status == FAIL for c in checks) else EXIT_OK
