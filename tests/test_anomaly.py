"""NaN/Inf origin (mldebug/agent/anomaly.py), in this process on a real torch: which module,
step and line is named, that nothing is read back to the host per module, that the hooks
change no result and go away, and that a failure inside steps aside.

The multi-rank path (`mldebug run --detect-anomaly` on 2 gloo ranks) is run by
tests/test_examples.py on examples/nan_loss.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
import torch.nn.modules.module as module_module  # noqa: E402
import torch.optim.optimizer as optimizer_module  # noqa: E402
from torch import nn  # noqa: E402
from torch.overrides import TorchFunctionMode  # noqa: E402

from mldebug.agent import anomaly  # noqa: E402
from mldebug.commands.run import parse_args  # noqa: E402
from mldebug.launch import env as envs  # noqa: E402
from mldebug.rankrules import is_library_path  # noqa: E402

SYNCS = {"item", "tolist", "__bool__", "__float__", "__int__", "cpu", "numpy", "nonzero"}


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(16)
        self.gate = nn.Linear(16, 16)
        self.act = nn.ReLU()

    def forward(self, x):
        return x + self.act(self.gate(self.norm(x)))  # GATE_CALL


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(4))
        self.head = nn.Linear(16, 1)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


class Recorder:
    """A detector on this process's torch, with what it emits and what failed."""

    def __init__(self, mode: str = anomaly.MODE_ON, rank: int = 1) -> None:
        self.events: list[tuple[str, str, dict]] = []
        self.failures: list[tuple[str, BaseException]] = []
        self.detector = anomaly.Detector(
            rank,
            mode,
            is_library_path,
            emit=lambda kind, message, **fields: self.events.append((kind, message, fields)),
            failed=lambda part, error: self.failures.append((part, error)),
        )
        self.detector.install_module_hooks(module_module)
        self.detector.install_step_hook(optimizer_module)

    def nonfinite(self) -> list[dict]:
        return [dict(fields, message=m) for kind, m, fields in self.events if kind == "nonfinite"]


@pytest.fixture
def recorder():
    made: list[Recorder] = []

    def make(**options) -> Recorder:
        made.append(Recorder(**options))
        return made[-1]

    yield make
    for one in made:
        one.detector.remove()
    assert not module_module._global_forward_hooks
    assert not module_module._global_forward_pre_hooks
    assert not optimizer_module._global_optimizer_pre_hooks


def train(steps: int, break_at: int | None = None, how: str = "overflow", seed: int = 0):
    """A small model trained for `steps`; at step `break_at` blocks.2.gate goes wrong."""
    torch.manual_seed(seed)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    losses = []
    for step in range(steps):
        if step == break_at:
            with torch.no_grad():
                if how == "overflow":  # finite weights whose output passes float32's max
                    model.blocks[2].gate.weight.fill_(1e38)
                else:
                    model.blocks[2].gate.weight[0, 0] = float("nan")
        loss = model(torch.randn(8, 16)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.detach().clone())
    return model, losses


def line_of(marker: str) -> int:
    lines = Path(__file__).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if marker in line)


def test_a_linear_that_overflows_at_step_3_is_named_with_rank_step_and_line(recorder, capfd):
    rec = recorder(rank=1)
    train(6, break_at=3)
    (event,) = rec.nonfinite()
    assert event["step"] == 3 and event["module"] == "blocks.2.gate"
    assert event["module_type"] == "Linear" and event["what"] == "output"
    assert event["value"] == "inf"
    assert event["message"] == "blocks.2.gate (Linear) output became inf at step 3"
    assert event["location"] == f"{__file__}:{line_of('# GATE_CALL')}"
    # The trail: the modules called before it, in call order, with their abs-max.
    names = [name for name, _ in event["trail"]]
    assert names == [
        "blocks.0.gate",
        "blocks.0.act",
        "blocks.0",
        "blocks.1.norm",
        "blocks.1.gate",
        "blocks.1.act",
        "blocks.1",
        "blocks.2.norm",
    ]
    assert all(0 < value < 1e3 for _, value in event["trail"])
    err = capfd.readouterr().err
    assert (
        f"mldebug: rank 1 step 3: blocks.2.gate (Linear) output became inf, called at "
        f"{__file__}:{line_of('# GATE_CALL')}\n" in err
    )
    assert not rec.failures


def test_non_finite_weights_are_told_from_an_output_that_overflowed(recorder):
    rec = recorder()
    train(5, break_at=2, how="nan weight")
    (event,) = rec.nonfinite()
    assert (event["module"], event["what"], event["value"], event["step"]) == (
        "blocks.2.gate",
        "weight",
        "nan",
        2,
    )


def test_a_backward_that_goes_non_finite_is_named_by_the_gradient_it_made(recorder):
    class Root(nn.Module):  # sqrt of 0: a finite forward, an infinite gradient
        def forward(self, x):
            return x.abs().sqrt()

    rec = recorder()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), Root(), nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    with torch.no_grad():
        model[0].weight.zero_()
        model[0].bias.zero_()
    model(torch.randn(2, 4)).sum().backward()
    optimizer.step()
    (event,) = rec.nonfinite()
    # The gradient into layer 0's output is where it turned: Root's backward made it.
    assert (event["module"], event["what"], event["value"]) == ("0", "output gradient", "nan")
    assert [name for name, _ in event["trail"]][-2:] == [
        "2 (output gradient)",
        "1 (output gradient)",
    ]


def test_no_host_sync_per_module_one_per_step(recorder):
    """Forward and backward read nothing back to the host; the step check reads once."""

    class Syncs(TorchFunctionMode):
        def __init__(self) -> None:
            super().__init__()
            self.seen: list[str] = []

        def __torch_function__(self, func, types, args=(), kwargs=None):
            name = getattr(func, "__name__", "")
            if name in SYNCS:
                self.seen.append(name)
            return func(*args, **(kwargs or {}))

    torch.manual_seed(0)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)

    def one_step():
        forward_backward, stepping = Syncs(), Syncs()
        with forward_backward:
            loss = model(torch.randn(8, 16)).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
        with stepping:
            optimizer.step()
        return forward_backward.seen, stepping.seen

    plain = one_step()
    rec = recorder()
    hooked = one_step()
    assert plain == ([], []) and hooked[0] == []
    assert hooked[1] == ["__bool__"]  # the whole step: one sync
    assert len(rec.detector.entries) == 0  # checked and cleared


def test_the_hooks_change_no_result_and_are_removed(recorder):
    _, plain = train(6)
    rec = recorder()
    _, hooked = train(6)
    assert all(torch.equal(a, b) for a, b in zip(plain, hooked, strict=True))
    rec.detector.remove()
    assert not module_module._global_forward_hooks and not rec.detector.handles
    train(2, break_at=0)
    assert rec.nonfinite() == []


def test_said_once_then_again_only_after_a_clean_step(recorder):
    rec = recorder()
    model = nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for value in (1.0, float("inf"), float("inf"), 1.0, float("nan")):
        model(torch.full((1, 2), value)).sum().backward()
        optimizer.zero_grad()  # the weights stay finite: only the input goes bad
        optimizer.step()
    found = [(e["step"], e["what"], e["value"]) for e in rec.nonfinite()]
    assert found == [(1, "input", "inf"), (4, "input", "nan")]


def test_stop_raises_at_the_step_with_the_report_as_its_message(recorder):
    rec = recorder(mode=anomaly.MODE_STOP, rank=0)
    with pytest.raises(FloatingPointError) as raised:
        train(6, break_at=4)
    assert str(raised.value).startswith("rank 0 step 4: blocks.2.gate (Linear) output became inf")
    assert len(rec.nonfinite()) == 1
    assert not module_module._global_forward_hooks  # it stood aside after raising


def test_torch_mode_turns_on_torchs_anomaly_mode(recorder):
    try:
        recorder(mode=anomaly.MODE_TORCH)
        nn.Linear(2, 2)(torch.ones(1, 2))
        assert torch.is_anomaly_enabled()
    finally:
        torch.autograd.set_detect_anomaly(False)


def test_a_failure_inside_is_said_once_and_the_program_runs_on_unchanged(recorder):
    _, plain = train(4)
    rec = recorder()

    def broken(tensor):
        raise RuntimeError("boom")

    rec.detector._load_torch()
    rec.detector._aminmax = broken
    _, hooked = train(4, break_at=2)
    _, again = train(4)
    assert [(part, str(error)) for part, error in rec.failures] == [("anomaly", "boom")]
    assert rec.nonfinite() == [] and not module_module._global_forward_hooks
    assert all(torch.equal(a, b) for a, b in zip(plain, again, strict=True))


def test_wrappers_are_left_out_of_the_names():
    class DistributedDataParallel(nn.Module):  # named as torch's, to be recognised by name
        def __init__(self, module) -> None:
            super().__init__()
            self.module = module

    net = Net()
    named = [
        (name, type(m).__name__)
        for m, name in anomaly.qualified_names(DistributedDataParallel(net))
    ]
    assert named[:3] == [("", "DistributedDataParallel"), ("", "Net"), ("blocks", "ModuleList")]
    assert ("blocks.2.gate", "Linear") in named and len(named) == len(list(net.modules())) + 1
    compiled = nn.Module()
    compiled._orig_mod = net
    assert "blocks.0.norm" in {name for _, name in anomaly.qualified_names(compiled)}


def test_detect_anomaly_option_becomes_the_agents_environment():
    for argv, mode in (
        (["--detect-anomaly", "train.py", "--lr", "1"], "on"),
        (["--detect-anomaly=stop", "train.py"], "stop"),
        (["--detect-anomaly=torch", "-m", "pkg.train"], "torch"),
        (["train.py", "--detect-anomaly"], None),  # the script's own option
    ):
        args, _, command = parse_args(argv)
        assert args.detect_anomaly == mode
        env = envs.debug_env(envs.DebugOptions(detect_anomaly=args.detect_anomaly), None)
        value = env.get(envs.ENV_DETECT_ANOMALY)
        assert anomaly.mode_from_env(value) == (anomaly.MODE_ON if mode == "on" else mode)
    assert parse_args(["--detect-anomaly", "train.py", "--lr", "1"])[2][1:] == [
        "train.py",
        "--lr",
        "1",
    ]
    assert anomaly.mode_from_env(None) is None and anomaly.mode_from_env("0") is None


def test_a_loop_without_optimizer_is_checked_when_mldebug_step_moves_the_step(recorder):
    """mldebug.step() moves the agent's count (Steps.set): the step that ends is checked
    first, under its own number; stop mode raises out of mldebug.step()."""
    from mldebug.agent.steps import Steps

    counted = Steps()
    rec = recorder(mode=anomaly.MODE_STOP)
    rec.detector.step_of = lambda: counted.value
    anomaly._check_before_explicit_steps(counted, rec.detector)
    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh())
    with pytest.raises(FloatingPointError, match=r"^rank 1 step 2: 0 \(Linear\) weight became nan"):
        for step in range(5):
            if step == 2:
                with torch.no_grad():
                    model[0].weight[1, 1] = float("nan")
            with torch.no_grad():
                model(torch.ones(3, 4))
            counted.set()
    assert counted.value == 2 and [e["step"] for e in rec.nonfinite()] == [2]
