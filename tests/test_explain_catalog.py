"""The catalog of messages (mldebug/explain/catalog.py): each entry's format makes lines
(hypothesis fills its variable parts), its pattern must read the parts back, and explain
must give the entry's kind and recipe for the line, pasted as users paste it (a launcher
prefix, in the middle of a flattened paste).
"""

from __future__ import annotations

import re
import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mldebug.explain.catalog import CATALOG, OWN, PARTS, RANK_PREFIX, Message
from mldebug.explain.engine import explain_text
from mldebug.recipes import load_recipes

RECIPES = {recipe.id for recipe in load_recipes()}
SAFE = string.ascii_letters + string.digits
WORDY = SAFE + " _-."

# A value for each kind of part, as the software prints it.
VALUES = {
    "n": st.integers(0, 10**9).map(str),
    "rank": st.integers(0, 4095).map(str),
    "pid": st.integers(1, 4_000_000).map(str),
    "port": st.integers(1, 65535).map(str),
    "errno": st.integers(1, 200).map(str),
    "xid": st.integers(1, 200).map(str),
    "addr": st.one_of(
        st.integers(1, 65535).map(lambda p: f"[::]:{p}"),
        st.integers(1, 65535).map(lambda p: f"0.0.0.0:{p}"),
        st.just("?UNKNOWN?"),
    ),
    "path": st.text(SAFE, min_size=1, max_size=12).map(lambda s: f"/dev/shm/nccl-{s}"),
    "bus": st.from_regex(r"0000:[0-9a-f]{2}:[0-9a-f]{2}", fullmatch=True),
    "comm": st.text(SAFE, min_size=1, max_size=16),
    "word": st.text(string.ascii_letters, min_size=1, max_size=12),
    "dims": st.tuples(*[st.integers(0, 1023)] * 3).map(lambda t: ",".join(map(str, t))),
    "kernel": st.sampled_from(
        [
            "/pytorch/aten/src/ATen/native/cuda/IndexKernel.cu:92",
            "../aten/src/ATen/native/cuda/Loss.cu:240",
            "/opt/conda/conda-bld/pytorch_1/work/aten/src/ATen/native/cuda/ScatterGatherKernel.cu:144",
        ]
    ),
    "text": st.text(WORDY, min_size=1, max_size=40).map(str.strip).filter(bool),
    "states": st.just("[<TrainingState.FORWARD_BACKWARD: 2>]"),
    "state": st.sampled_from(["TrainingState.IDLE", "TrainingState.PRE_BACKWARD"]),
    "dtypes": st.just("{torch.float32, torch.bfloat16}"),
    "flag": st.sampled_from(["true", "false", "0", "1"]),
    "version": st.sampled_from(["2.21.5", "2.26.2+cuda12.6", "2.18.3"]),
    "iface": st.sampled_from(["eth0:10.0.4.12<0>", "ib0:10.8.0.17<0>", "bond0:172.36.1.8<0>"]),
    "float": st.sampled_from(["0.0001", "1e-05", "0.5"]),
    "scope": st.sampled_from(["__global__", "__shared__", "__local__"]),
    "access": st.sampled_from(["read", "write"]),
    "loopback": st.tuples(*[st.integers(0, 255)] * 3).map(lambda t: "127." + ".".join(map(str, t))),
}
PREFIXES = st.sampled_from(["", "[rank3]:", "[default3]:", "node7:3:", "3:", "3: "])


def _names(message: Message) -> list[str]:
    return re.findall(r"\{(\w+)\}", message.format)


def _value(message: Message, name: str):
    choices = dict(message.choices)
    if name in choices:
        return st.sampled_from(choices[name])
    return VALUES[name.rstrip("0123456789")]


def _lines(message: Message):
    names = _names(message)
    return st.tuples(*[_value(message, n) for n in names]).map(
        lambda values: dict(zip(names, values, strict=True))
    )


def test_every_entry_is_whole_and_points_to_a_shipped_recipe():
    ids = [m.id for m in CATALOG]
    assert len(ids) == len(set(ids))
    for message in CATALOG:
        assert message.meaning and message.source and message.family
        assert message.recipe is None or message.recipe in RECIPES, message.id
        for _, table in [message.recipe_by] if message.recipe_by else []:
            assert all(recipe in RECIPES for _, recipe in table)
        for name in _names(message):
            assert name in dict(message.choices) or name.rstrip("0123456789") in PARTS
        assert message.rank in (RANK_PREFIX, "none") or message.rank in _names(message)
        assert len(message.cue) >= 8, message.id  # the cue is what keeps long logs fast


@pytest.mark.parametrize("message", CATALOG, ids=lambda m: m.id)
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_format_reads_its_parts_back(message, data):
    parts = data.draw(_lines(message))
    line = message.format.format(**parts)
    match = message.pattern.search(line)
    assert match is not None, line
    assert {k: v for k, v in match.groupdict().items()} == parts


@pytest.mark.parametrize("message", OWN, ids=lambda m: m.id)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), prefix=PREFIXES, flattened=st.booleans())
def test_explain_gives_the_entrys_finding_for_a_line_of_its_format(
    message, data, prefix, flattened
):
    parts = data.draw(_lines(message))
    line = message.format.format(**parts)
    before = "Epoch 3: loss=2.31 step 1200 ok"
    paste = f"{before} {line} done" if flattened else f"{before}\n{prefix}{line}\n"
    found = explain_text(paste, "paste.log")
    want = message.recipe_for(parts)
    mine = [f for f in found if (f.kind, f.recipe) == (message.kind, want)]
    assert mine, (line, [(f.kind, f.recipe) for f in found])
    finding = mine[0]
    assert finding.severity == message.severity
    assert finding.lines  # it rests on the paste's line
    if message.rank == RANK_PREFIX and prefix and not flattened:
        assert finding.ranks == (3,)
    elif message.rank not in (RANK_PREFIX, "none"):
        assert finding.ranks == (int(parts[message.rank]),)


def test_a_line_holds_the_message_of_one_entry_only():
    # "CUDA error: unknown error" is the hardware entry's, never also the kernel faults'
    found = explain_text("RuntimeError: CUDA error: unknown error\n")
    assert [(f.kind, f.recipe) for f in found if f.kind != "python_error"] == [
        ("gpu_hardware", "xid-ecc-errors")
    ]


def test_a_dataloader_worker_killed_names_the_recipe_of_its_signal():
    def top(signal: str) -> str | None:
        line = f"RuntimeError: DataLoader worker (pid 4121) is killed by signal: {signal}. "
        return explain_text(line + "\n")[0].recipe

    assert top("Bus error") == "dataloader-worker-hang"
    assert top("Killed") == "memory-leak"
    assert top("Segmentation fault") == "native-crash"


def test_corrected_pcie_errors_alone_are_information_not_a_warning():
    text = (
        "[  +0.000316] pcieport 0000:00:03.0: AER: Corrected error received: 0000:00:03.0\n"
        "[  +0.000005] pcieport 0000:00:03.0: PCIe Bus Error: severity=Corrected, type=Data "
        "Link Layer, (Transmitter ID)\n"
    )
    found = explain_text(text)
    assert found and all(f.severity == "info" for f in found)


NCCL_INFO = [m for m in CATALOG if m.reader == "nccl"]


@pytest.mark.parametrize("message", NCCL_INFO, ids=lambda m: m.id)
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_an_nccl_info_line_of_the_catalog_is_never_a_warning(message, data):
    parts = data.draw(_lines(message))
    line = f"gpu-node-14:4101:4190 [0] {message.format.format(**parts)}"
    assert message.pattern.search(line)
    found = explain_text(line + "\n", "info.log")
    assert all(f.severity == "info" for f in found), [(f.kind, f.summary) for f in found]


def test_a_catalog_message_deep_in_a_long_log_is_still_read():
    # GIVEN 30,000 lines of NCCL INFO chatter (a long log is read only around known words)
    chatter = [
        f"gpu-{i % 8}:{4100 + i % 8}:{4200 + i % 8} [{i % 8}] NCCL INFO Channel {i % 32:02d}/0 : "
        f"{i % 8}[{i % 8}] -> {(i + 1) % 8}[{(i + 1) % 8}] via P2P/IPC/read"
        for i in range(30_000)
    ]
    line = (
        "RuntimeError: DDP expects same model across all ranks, but Rank 0 has 382 params, "
        "while rank 5 has inconsistent 0 params."
    )
    text = "\n".join(chatter[:15_000] + [line] + chatter[15_000:])
    # THEN the message the catalog knows (no word of the old list in it) is found
    top = explain_text(text, "long.log")[0]
    assert (top.kind, top.recipe, top.ranks) == ("ddp_model_mismatch", "ddp-model-mismatch", (5,))
