"""`mldebug explain` on fragments, as pastes come: cut at random lines, their rank prefixes
written by another launcher, progress bars glued to their lines, or garbage. It never
raises, and never loses a finding the whole log had while the lines it rests on are there.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mldebug.explain.engine import explain_text

CORPUS = Path(__file__).resolve().parent / "data" / "explain"
CASES = json.loads((CORPUS / "index.json").read_text())["cases"]
TEXTS = {case["file"]: (CORPUS / case["file"]).read_bytes().decode() for case in CASES}
WHOLE = {name: explain_text(text, name) for name, text in TEXTS.items()}
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

names = st.sampled_from(sorted(TEXTS))


def _numbers(finding) -> list[int]:
    return [int(where.rsplit(":", 1)[1]) for where in finding.lines]


@SETTINGS
@given(name=names, data=st.data())
def test_a_fragment_keeping_a_findings_lines_keeps_the_finding(name, data):
    lines = TEXTS[name].split("\n")
    whole = WHOLE[name]
    finding = data.draw(st.sampled_from(whole))
    cited = _numbers(finding)
    first, last = min(cited), max(cited)
    start = data.draw(st.integers(1, first))  # 1-based, kept from here
    end = data.draw(st.integers(last, len(lines)))  # to here
    fragment = "\n".join(lines[start - 1 : end])
    kinds = {f.kind for f in explain_text(fragment, name)}
    assert finding.kind in kinds, (name, start, end, finding.summary)


_TORCH_PREFIX = re.compile(r"^\[rank(\d+)\]:", re.M)
LAUNCHERS = (
    lambda rank: f"{rank}: ",  # srun --label
    lambda rank: f"[1,{rank}]<stderr>:",  # Open MPI --tag-output
    lambda rank: f"[node-{rank // 8}:{rank}] ",  # mldebug run
    lambda rank: f"[rank{rank}]:",  # torch
)


@SETTINGS
@given(
    name=st.sampled_from(sorted(n for n, t in TEXTS.items() if _TORCH_PREFIX.search(t))),
    picks=st.lists(st.integers(0, len(LAUNCHERS) - 1), min_size=1, max_size=64),
)
def test_other_launchers_prefixes_name_the_same_ranks(name, picks):
    count = iter(range(10**6))

    def other(match: re.Match) -> str:
        return LAUNCHERS[picks[next(count) % len(picks)]](int(match.group(1)))

    text = _TORCH_PREFIX.sub(other, TEXTS[name])
    top, again = WHOLE[name][0], explain_text(text, name)[0]
    assert (again.kind, again.ranks, again.recipe) == (top.kind, top.ranks, top.recipe)


BAR = "{label}: {pct:>3}%|{fill:<20}| {done}/{total} [00:{sec:02d}<01:00, {rate:.2f}it/s]"


@SETTINGS
@given(
    name=names,
    where=st.lists(st.integers(0, 400), min_size=1, max_size=8),
    label=st.sampled_from(["Map", "Running tokenizer on dataset", "Epoch 3", "steps"]),
    pct=st.integers(0, 100),
    redraw=st.booleans(),
)
def test_progress_bars_glued_to_lines_change_nothing(name, where, label, pct, redraw):
    lines = TEXTS[name].split("\n")
    bar = BAR.format(
        label=label, pct=pct, fill="█" * (pct // 5), done=pct, total=100, sec=pct % 60, rate=1.5
    )
    if redraw:  # tqdm redraws with \r: the terminal shows the last, the file keeps all
        bar = "\r".join([bar, bar.replace(f"{pct:>3}%", f"{min(pct + 1, 100):>3}%")])
    for at in sorted({w % max(1, len(lines)) for w in where}, reverse=True):
        lines[at] = bar + lines[at]
    top, again = WHOLE[name][0], explain_text("\n".join(lines), name)[0]
    assert (again.kind, again.ranks, again.recipe) == (top.kind, top.ranks, top.recipe)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=3000))
def test_any_text_never_raises(text):
    for finding in explain_text(text):
        assert 0 < finding.confidence <= 1 and finding.summary


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=3000), st.sampled_from(sorted(TEXTS)))
def test_bytes_spliced_into_a_real_log_never_raise(noise, name):
    text = TEXTS[name]
    half = len(text) // 2
    explain_text(text[:half] + noise.decode("utf-8", "replace") + text[half:])


def test_ansi_colours_and_carriage_returns_are_read_through():
    text = TEXTS["dup_gpu_one_line.log"]
    coloured = "\x1b[1;31m" + text.rstrip("\n") + "\x1b[0m\r\n"
    assert explain_text(coloured)[0].kind == "duplicate_gpu"


def test_a_long_log_is_read_around_what_matters_and_keeps_its_line_numbers():
    # GIVEN 30,000 lines of NCCL INFO chatter with a fragment of timeouts in the middle
    chatter = [
        f"[rank{i % 8}]:gpu-{i % 8}:{4100 + i % 8}:{4200 + i % 8} [{i % 8}] NCCL INFO Channel "
        f"{i % 32:02d}/0 : {i % 8}[{i % 8}] -> {(i + 1) % 8}[{(i + 1) % 8}] via P2P/IPC/read"
        for i in range(30_000)
    ]
    fragment = TEXTS["timeout_rank6_absent.log"].rstrip("\n").split("\n")
    text = "\n".join(chatter[:15_000] + fragment + chatter[15_000:])
    # WHEN explained, THEN the suspect is found, cited at its own line numbers
    top = explain_text(text, "big.log")[0]
    assert (top.kind, top.ranks) == ("timeout_suspect", (6,))
    assert "big.log:15001" in top.lines
