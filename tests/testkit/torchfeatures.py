"""What the torch the tests run on can do, asked of it in a subprocess (the test process
never imports torch for it): the compatibility stage (.ci/compat) runs the same tests on
torches that lack a feature, and a test of that feature says so instead of failing."""

from __future__ import annotations

import functools
import importlib.metadata
import subprocess
import sys
import tempfile

import pytest

_GLOO_FR = """\
import io, json, pickle, sys
import torch, torch.distributed as dist
from torch._C import _distributed_c10d as c10d
dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=0, world_size=1)
dist.all_reduce(torch.ones(1))
dump = getattr(c10d, "_dump_fr_trace_json", None)
data = json.loads(dump()) if dump else pickle.loads(
    getattr(c10d, "_dump_nccl_trace")(includeCollectives=True, includeStackTraces=False,
                                      onlyActive=False))
print(len(data.get("entries", [])))
"""


@functools.cache
def gloo_flight_recorder() -> bool:
    """Does this torch record gloo's collectives in its Flight Recorder (torch 2.13 does,
    2.4 records NCCL's only)?"""
    with tempfile.TemporaryDirectory() as folder:
        done = subprocess.run(
            [sys.executable, "-c", _GLOO_FR, f"{folder}/store"],
            capture_output=True,
            text=True,
            timeout=180,
        )
    return done.returncode == 0 and done.stdout.strip().splitlines()[-1:] != ["0"]


def needs_gloo_flight_recorder() -> None:
    """Skip the test (its fixture) where torch records no gloo collective."""
    if not gloo_flight_recorder():
        version = importlib.metadata.version("torch")
        pytest.skip(f"torch {version} keeps no Flight Recorder of gloo collectives")
