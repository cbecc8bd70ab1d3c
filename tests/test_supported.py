"""The tested range (README, Supported) as `mldebug doctor` tells it, and torch 2.15's
TORCH_DIST_USE_NCCL2 read as torch reads it (distributed_c10d.py compares it with "0")."""

from __future__ import annotations

import pytest

from mldebug.doctor import OK, WARN
from mldebug.doctor.envvars import check_env
from mldebug.doctor.gpu import SUPPORTED_PYTHON, SUPPORTED_TORCH, support_check
from mldebug.recipes import get_recipe


@pytest.mark.parametrize(
    ("torch", "python"),
    [("2.4.1+cu121", "3.10.13"), ("2.13.0+cpu", "3.11.7"), ("2.15.0+cu132", "3.13.0")],
)
def test_versions_in_the_range_are_ok(torch, python):
    check = support_check({"torch": torch, "python": python})
    assert check.status == OK and "in the tested range" in check.detail


@pytest.mark.parametrize(
    ("torch", "python", "said"),
    [
        ("2.3.1", "3.10.13", "torch 2.3.1 is outside 2.4-2.15"),
        ("2.16.0.dev20261201", "3.12.1", "torch 2.16.0.dev20261201 is outside 2.4-2.15"),
        ("2.15.0", "3.14.0", "Python 3.14.0 is outside 3.10-3.13"),
        ("1.13.1", "3.9.18", "torch 1.13.1 is outside 2.4-2.15; Python 3.9.18 is outside"),
    ],
)
def test_versions_outside_the_range_are_a_warning(torch, python, said):
    check = support_check({"torch": torch, "python": python})
    assert check.status == WARN and said in check.detail
    assert get_recipe(check.recipe) is not None


def test_the_range_is_the_readmes():
    from pathlib import Path

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    low, high = SUPPORTED_TORCH
    assert f"| torch | {low[0]}.{low[1]} to {high[0]}.{high[1]}" in readme
    low, high = SUPPORTED_PYTHON
    assert f"| Python | {low[0]}.{low[1]} to {high[0]}.{high[1]}" in readme


@pytest.mark.parametrize("value", ["false", "off", "no", " 0"])
def test_a_rollback_torch_does_not_read_as_one_is_said(value):
    checks = check_env({"TORCH_DIST_USE_NCCL2": value})
    check = next(c for c in checks if c.name == "env TORCH_DIST_USE_NCCL2")
    assert check.status == WARN and "only for the value 0" in check.detail
    assert "nccl-legacy" in check.detail


@pytest.mark.parametrize("value", ["0", "1"])
def test_the_values_torch_means_stay_silent(value):
    (check,) = check_env({"TORCH_DIST_USE_NCCL2": value})
    assert check.status == OK and "none looks wrong" in check.detail
