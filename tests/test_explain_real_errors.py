"""The catalog's messages as torch 2.13 prints them, from real jobs: two gloo ranks that
build different models before DDP (under `mldebug run`, read from the run directory), a
master port already held by another store, and a DataLoader worker killed by SIGBUS (what
a full /dev/shm does to it). `mldebug explain` must name each, with its recipe."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.multirank

DDP_MISMATCH = textwrap.dedent(
    """
    from datetime import timedelta
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    layers = 2 if dist.get_rank() == 0 else 3  # an adapter added on one rank only
    model = torch.nn.Sequential(*[torch.nn.Linear(4, 4) for _ in range(layers)])
    torch.nn.parallel.DistributedDataParallel(model)
    """
)
PORT_HELD = textwrap.dedent(
    """
    import os
    from datetime import timedelta
    import torch.distributed as dist

    held = dist.TCPStore("127.0.0.1", 0, 1, True, timeout=timedelta(seconds=5))
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(held.port), RANK="0", WORLD_SIZE="1")
    dist.init_process_group("gloo", timeout=timedelta(seconds=10))
    """
)
SIGBUS_WORKER = textwrap.dedent(
    """
    import os, signal
    import torch
    from torch.utils.data import DataLoader, Dataset

    class Shards(Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, i):
            if i == 5:
                os.kill(os.getpid(), signal.SIGBUS)
            return torch.zeros(4)

    for batch in DataLoader(Shards(), batch_size=4, num_workers=2):
        pass
    """
)


def explain(*args: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "mldebug", "explain", "--json", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    return json.loads(done.stdout)["findings"][0]


def test_ranks_that_build_different_models_are_named_by_ddps_check(tmp_path):
    script = tmp_path / "mismatch.py"
    script.write_text(DDP_MISMATCH)
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "mldebug", "run", "--run-dir", str(run_dir)]
        + ["--nproc-per-node", "2", str(script)],
        capture_output=True,
        timeout=300,
        env={**os.environ, "MLDEBUG_RUNS_DIR": str(tmp_path / "runs")},
    )
    assert done.returncode != 0, done.stderr[-2000:]
    top = explain(str(run_dir))
    assert (top["kind"], top["recipe"]) == ("ddp_model_mismatch", "ddp-model-mismatch")
    assert "DDP expects same model across all ranks" in top["summary"]
    assert top["ranks"] == [0, 1]  # each rank names the other as the inconsistent one


def run_alone(tmp_path: Path, name: str, script: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(script)
    out = tmp_path / f"{name}.out"
    with out.open("wb") as sink:
        done = subprocess.run(
            [sys.executable, str(path)], stdout=sink, stderr=subprocess.STDOUT, timeout=300
        )
    assert done.returncode != 0, out.read_text()[-2000:]
    return out


def test_a_port_already_in_use_is_named(tmp_path):
    top = explain(str(run_alone(tmp_path, "port", PORT_HELD)))
    assert (top["kind"], top["recipe"]) == ("port_in_use", "port-in-use")


def test_a_dataloader_worker_killed_by_sigbus_points_to_shared_memory(tmp_path):
    top = explain(str(run_alone(tmp_path, "sigbus", SIGBUS_WORKER)))
    assert (top["kind"], top["recipe"]) == ("dataloader_worker", "dataloader-worker-hang")
