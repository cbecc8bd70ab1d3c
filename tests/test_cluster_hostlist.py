"""Host lists as SLURM writes them, against a plain oracle: hypothesis builds host lists
from parts (prefixes, bracket groups of numbers and padded ranges, suffixes) and knows
the hosts each names; `expand` must give exactly those, in order, each once."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mldebug.cluster.hostlist import compress, expand

names = st.text("abcxyz-_.", min_size=1, max_size=5)
affixes = st.text("abcxyz-_.0123456789", max_size=4)


@st.composite
def bracket(draw):
    """A bracket group: its text and the numbers it names (with their padding)."""
    items, out = [], []
    for _ in range(draw(st.integers(1, 3))):
        width = draw(st.integers(1, 3))
        low = draw(st.integers(0, 10**width - 1))
        if draw(st.booleans()):
            high = draw(st.integers(low, low + 12))
            items.append(f"{low:0{width}d}-{high}")
            out += [f"{n:0{width}d}" for n in range(low, high + 1)]
        else:
            items.append(f"{low:0{width}d}")
            out.append(f"{low:0{width}d}")
    return "[" + ",".join(items) + "]", out


@st.composite
def entry(draw):
    """One entry (prefix, groups with literals between them) and its hosts, the oracle's
    way: the product of the groups, left group outermost."""
    text = draw(names)
    choices = [[text]]
    for _ in range(draw(st.integers(0, 2))):
        group, numbers = draw(bracket())
        literal = draw(affixes)
        text += group + literal
        choices += [numbers, [literal]]
    return text, ["".join(parts) for parts in itertools.product(*choices)]


@given(st.lists(entry(), min_size=1, max_size=4))
def test_expand_matches_the_oracle(entries):
    text = ",".join(t for t, _ in entries)
    expected = list(dict.fromkeys(h for _, hosts in entries for h in hosts))
    assert expand(text) == expected


@given(st.lists(st.sampled_from(["n", "gpu", "x-"]), min_size=1), st.data())
def test_compress_expands_back_to_the_same_hosts(prefixes, data):
    hosts = [
        p + str(data.draw(st.integers(0, 120))).zfill(data.draw(st.integers(1, 3)))
        for p in prefixes
    ]
    assert set(expand(compress(hosts))) == set(hosts)


@pytest.mark.parametrize(
    ("text", "hosts"),
    [
        ("node[01-04],node07", ["node01", "node02", "node03", "node04", "node07"]),
        ("n[1-3,5]", ["n1", "n2", "n3", "n5"]),
        ("n[08-10]", ["n08", "n09", "n10"]),
        ("r[1-2]n[1-2]-ib", ["r1n1-ib", "r1n2-ib", "r2n1-ib", "r2n2-ib"]),
        ("login1, login1", ["login1"]),
    ],
)
def test_slurm_examples(text, hosts):
    assert expand(text) == hosts


@pytest.mark.parametrize(
    "bad", ["", "n[1-", "n]1[", "n[a-b]", "n[3-1]", "n[[1]]", "n[0-99999999]", "a b", "n$(x)"]
)
def test_bad_host_lists_are_refused(bad):
    with pytest.raises(ValueError):
        expand(bad)


def test_the_command_line_refuses_a_bad_host_list_in_one_line(capsys):
    from mldebug.cli import main

    assert main(["dump", "--hosts", "node[1-"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--hosts" in err


@pytest.mark.skipif(shutil.which("scontrol") is None, reason="SLURM's scontrol is not installed")
@pytest.mark.parametrize("text", ["node[01-04],node07", "n[1-3,5],m[08-10]", "r[1-2]n[08-10]"])
def test_expand_agrees_with_scontrol(text, tmp_path):
    # `scontrol show hostnames` expands a host list with any slurm.conf, no cluster needed.
    # (SLURM 22.05 refuses text after a bracket, "n[1-2]-ib", which expand() accepts.)
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=x\nSlurmctldHost=localhost\nNodeName=localhost\n")
    done = subprocess.run(
        ["scontrol", "show", "hostnames", text],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "SLURM_CONF": str(conf)},
    )
    assert done.returncode == 0, done.stderr
    assert expand(text) == done.stdout.split()
