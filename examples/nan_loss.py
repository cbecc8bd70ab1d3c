"""A NaN appears: from step 5, one sample of rank 1's batch was never normalised.

    mldebug run --nproc-per-node 2 --detect-anomaly examples/nan_loss.py

Its values are around 1e20: the encoder passes them on, the squared activation makes them
1e40, past float32's largest number, so inf, and the loss turns NaN. Nothing in the script
checks for it, as in most training loops: DDP averages the gradients across ranks, so the
bad batch poisons every rank's weights at the same step, every loss after it is NaN, and
the job runs to the end. `--detect-anomaly` names where it began, without a sync per
module: rank 1, step 5, the module `act` (SquaredReLU) whose output became inf, the line
that called it, and the abs-max of the modules before it (`mldebug dump` shows the same as
a finding; `mldebug recipes nonfinite-origin` says what to do).
"""

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

BAD_RANK = 1
BAD_STEP = 5


class SquaredReLU(nn.Module):
    """relu(x) ** 2, the Primer activation: it squares whatever comes in."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x).pow(2)


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Linear(32, 64)
        self.act = SquaredReLU()
        self.head = nn.Linear(64, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.encoder(x)
        return self.head(self.act(hidden))


def batch(step: int, rank: int) -> torch.Tensor:
    data = torch.randn(16, 32)
    if rank == BAD_RANK and step >= BAD_STEP:
        data[0] *= 1e20  # one sample that skipped normalisation
    return data


def main() -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(Net())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(10):
        out = model(batch(step, rank))
        loss = (out - out.mean()).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
