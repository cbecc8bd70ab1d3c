"""The shipped recipes: their shape, the commands they tell a user to run, and `mldebug recipes`."""

from __future__ import annotations

import importlib
import io
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mldebug.cli import COMMANDS, main
from mldebug.recipes import SECTIONS, get_recipe, load_recipes, parse_recipe

RECIPES_DIR = Path(__file__).resolve().parent.parent / "mldebug" / "recipes"

# /work/wt/CONTRACT.md: the ids findings on every branch may name.
CONTRACT_IDS = """
collective-hang frozen-rank memory-growth mismatched-collectives missing-ranks missing-thread
nonfinite-origin ptrace-permission rank-crash rank-outside-collective rendezvous-hang
nccl-watchdog-timeout nccl-init-failure nccl-sockets-instead-of-ib nccl-version-mismatch
nccl-warnings connection-refused rank-behind cuda-async-error cuda-oom cuda-oom-fragmentation
memory-leak nan-loss overflowing-module loss-spikes xid-ecc-errors zombie-gpu-processes
d-state-frozen-fs disk-full-checkpoint slurm-preemption stragglers dataloader-worker-hang
gil-holding-c-code tiny-model-repro node-unreachable native-crash core-dumps
""".split()

# Placeholders a recipe writes in capitals, and what stands for them here.
PLACEHOLDERS = {"PID": "4242", "RUN": "/tmp/run"}

_SPAN = re.compile(r"`([^`]+)`")
_FENCE = re.compile(r"^```.*?$(.*?)^```", re.S | re.M)


def test_the_contract_ids_all_ship_and_more():
    ids = {recipe.id for recipe in load_recipes()}
    assert set(CONTRACT_IDS) <= ids
    assert len(ids) >= 27


def test_recipe_ids_are_unique_and_match_their_file():
    files = sorted(p.stem for p in RECIPES_DIR.glob("*.md") if p.name != "README.md")
    ids = [recipe.id for recipe in load_recipes()]
    assert sorted(ids) == files


@pytest.mark.parametrize("recipe", load_recipes(), ids=lambda r: r.id)
def test_every_recipe_has_front_matter_and_all_sections(recipe):
    assert recipe.title and recipe.symptom and recipe.match, recipe.id
    assert recipe.body.startswith(f"# {recipe.title}\n")
    sections = recipe.sections()
    assert list(sections)[: len(SECTIONS)] == list(SECTIONS), recipe.id
    assert all(sections[name] for name in SECTIONS), recipe.id
    assert all("|" not in literal and literal.strip() == literal for literal in recipe.match)
    assert "mldebug " in sections["Confirm with mldebug"], recipe.id


@pytest.mark.parametrize("recipe", load_recipes(), ids=lambda r: r.id)
def test_related_recipes_exist(recipe):
    related = recipe.related()
    assert related, recipe.id
    assert recipe.id not in related
    assert [rid for rid in related if get_recipe(rid) is None] == []


def test_the_readme_index_lists_every_recipe():
    index = (RECIPES_DIR / "README.md").read_text()
    assert [r.id for r in load_recipes() if f"`{r.id}`" not in index] == []


def cited_commands(body: str) -> list[str]:
    """Every `mldebug ...` command line of a recipe: inline code and lines of code blocks."""
    found = [" ".join(span.split()) for span in _SPAN.findall(_FENCE.sub("", body))]
    for block in _FENCE.findall(body):
        found += [line.strip().removeprefix("$ ") for line in block.splitlines()]
    return [text for text in found if text.startswith("mldebug ")]


def parse_cited(text: str) -> None:
    argv = [PLACEHOLDERS.get(t, t) for t in shlex.split(text)]
    for name, value in PLACEHOLDERS.items():
        argv = [t.replace(f"{name}/", f"{value}/") for t in argv]
    command, rest = argv[1], argv[2:]
    if command not in COMMANDS:
        pytest.fail(f"no command `mldebug {command}`: {text}")
    module = importlib.import_module(COMMANDS[command][0])
    parser = module.build_parser()
    if not rest and command == "run":
        return  # `mldebug run` named in prose, not a command line
    parse = getattr(module, "parse_args", parser.parse_args)
    try:
        parse(rest)
    except SystemExit as error:
        pytest.fail(f"`{text}` does not parse (exit {error.code})")
    if command == "recipes" and rest and not rest[0].startswith("-"):
        assert get_recipe(rest[0]) is not None, text


@pytest.mark.parametrize("recipe", load_recipes(), ids=lambda r: r.id)
def test_every_command_a_recipe_cites_parses(recipe, capsys):
    commands = cited_commands(recipe.body)
    assert commands, recipe.id
    for text in commands:
        parse_cited(text)


def test_a_command_with_a_wrong_option_is_caught(capsys):
    with pytest.raises(pytest.fail.Exception):
        parse_cited("mldebug dump --no-such-option")
    with pytest.raises(pytest.fail.Exception):
        parse_cited("mldebug frobnicate --json")
    parse_cited("mldebug dump --slurm 123456")


def test_front_matter_is_optional_and_tolerant():
    plain = parse_recipe("# Just markdown\n\ntext", fallback_id="plain")
    assert (plain.id, plain.title, plain.body) == ("plain", "plain", "# Just markdown\n\ntext")
    unterminated = parse_recipe("---\nid: x\n# body", fallback_id="f")
    assert unterminated.id == "f"
    full = parse_recipe("---\nid: a\ntitle: T: with colon\nsymptom: s\nmatch: x y | z\n---\n\nb\n")
    assert (full.id, full.title, full.symptom, full.body) == ("a", "T: with colon", "s", "b")
    assert full.match == ("x y", "z")


# --- the command -------------------------------------------------------------------------


def test_recipes_command_lists_and_prints(capsys):
    assert main(["recipes"]) == 0
    listing = capsys.readouterr().out
    assert "collective-hang" in listing and "Every rank waits" in listing
    assert "All ranks sit in one all_reduce" in listing  # the one-line symptom
    assert main(["recipes", "missing-ranks"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# Some ranks are not there") and "## Confirm with mldebug" in out
    assert main(["recipes", "no-such-recipe"]) == 3
    err = capsys.readouterr().err
    assert "no recipe 'no-such-recipe'" in err and "Known recipes" in err


def test_recipes_json(capsys):
    assert main(["recipes", "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)["recipes"]
    assert {r["id"] for r in listing} >= set(CONTRACT_IDS)
    oom = next(r for r in listing if r["id"] == "cuda-oom")
    assert oom["symptom"] and "CUDA out of memory" in oom["match"]
    assert "cuda-oom-fragmentation" in oom["related"]
    assert main(["recipes", "cuda-oom", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["body"].startswith("# CUDA out of memory")


def test_recipe_renders_markdown_on_a_terminal_and_plain_text_in_a_pipe():
    argv = [sys.executable, "-m", "mldebug", "recipes", "cuda-oom"]
    piped = subprocess.run(argv, capture_output=True, text=True)
    assert piped.returncode == 0 and piped.stdout.startswith("# CUDA out of memory\n")
    # On a terminal (a pty), rich renders it: no "#" markers, styled with escapes.
    main_fd, side_fd = os.openpty()
    env = dict(os.environ, COLUMNS="100", TERM="xterm-256color")
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen(argv, stdout=side_fd, stderr=side_fd, env=env)
    os.close(side_fd)
    chunks = []
    while True:
        try:
            chunk = os.read(main_fd, 65536)
        except OSError:  # EIO: the other side closed
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(main_fd)
    assert proc.wait(timeout=60) == 0
    shown = b"".join(chunks).decode("utf-8", "replace")
    assert "CUDA out of memory" in shown and "Confirm with mldebug" in shown
    assert "# CUDA out of memory" not in shown and "\x1b[" in shown


# --- search on real error text -------------------------------------------------------------

GPU = Path(__file__).resolve().parent / "data" / "gpu"
DATA = Path(__file__).resolve().parent / "data"


def best(text: str) -> str:
    from mldebug.recipes.search import search

    hits = search(text)
    assert hits, text[:80]
    return hits[0].recipe.id


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        # recorded on an H200 (tests/data/gpu/README.md)
        ("gpu/nccl_timeout/stderr.rank0.txt", "nccl-watchdog-timeout"),
        ("gpu/memory/oom_message.txt", "cuda-oom"),
        ("gpu/memory/oom_full_message.txt", "cuda-oom"),
        ("gpu/device_assert/stderr.rank0.txt", "cuda-async-error"),
        ("gpu/nccl_duplicate_gpu/stderr.rank0.txt", "duplicate-gpu"),
        ("gpu/nccl_duplicate_gpu/stdout.rank0.txt", "duplicate-gpu"),
        # gloo jobs on torch 2.13 (tests/data/nccl/README.md)
        ("nccl/gloo/recv_timeout/stderr.rank0.txt", "collective-hang"),
        ("nccl/gloo/peer_closed/stderr.rank0.txt", "connection-refused"),
        # py-spy's own refusal, recorded from the real py-spy
        ("pyspy_error_permission.txt", "ptrace-permission"),
    ],
)
def test_search_puts_the_right_recipe_first_for_recorded_errors(source, expected):
    assert best((DATA / source).read_text()) == expected


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        # Single lines as they appear in those recordings, pasted alone.
        (
            "[rank0]:[E1201 00:23:43.367818701 ProcessGroupNCCL.cpp:689] [Rank 0] Watchdog "
            "caught collective operation timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE, "
            "NumelIn=1048576, NumelOut=1048576, Timeout(ms)=15000) ran for 15080 milliseconds "
            "before timing out.",
            "nccl-watchdog-timeout",
        ),
        ("torch.AcceleratorError: CUDA error: device-side assert triggered", "cuda-async-error"),
        # The documented wording of CUDA's cudaErrorIllegalAddress as torch raises it.
        ("RuntimeError: CUDA error: an illegal memory access was encountered", "cuda-async-error"),
        # NCCL WARN lines in NCCL's documented log format (host:pid:tid [dev] file:line).
        (
            "node-3:4711:4790 [2] NCCL WARN NET/IB : Got completion from peer 10.0.0.7<48213> "
            "with error 12, opcode 0, len 0, vendor err 129",
            "nccl-warnings",
        ),
        (
            "vm:600:600 [0] init.cc:904 NCCL WARN Duplicate GPU detected : rank 0 and rank 1 "
            "both on CUDA device 60",
            "duplicate-gpu",
        ),
        # Words a user would type.
        ("watchdog timeout", "nccl-watchdog-timeout"),
        ("expandable_segments fragmentation", "cuda-oom-fragmentation"),
        ("No space left on device while saving checkpoint", "disk-full-checkpoint"),
        ("DataLoader worker (pid 4711) is killed by signal: Bus error.", "dataloader-worker-hang"),
        ("Segmentation fault (core dumped)", "native-crash"),
        (
            "slurmstepd: error: *** JOB 1 ON n1 CANCELLED AT 2026 DUE TO TIME LIMIT ***",
            "slurm-preemption",
        ),
        ("NVRM: Xid (PCI:0000:10:1c): 79, pid=0, GPU has fallen off the bus.", "xid-ecc-errors"),
    ],
)
def test_search_puts_the_right_recipe_first_for_error_lines(line, expected):
    assert best(line) == expected


def test_a_fragmented_oom_points_to_fragmentation_first():
    # The recorded message with its numbers changed: 14.80 GiB cached, 2 GiB asked.
    text = (GPU / "memory" / "oom_message.txt").read_text().splitlines()[0]
    text = text.replace("400.00 GiB", "2.00 GiB").replace(
        "3.46 MiB is reserved", "14.80 GiB is reserved"
    )
    from mldebug.recipes.search import search

    hits = search(text)
    assert [h.recipe.id for h in hits[:2]] == ["cuda-oom-fragmentation", "cuda-oom"]
    assert "14.80 gib reserved but unallocated >= 2.00 gib requested" in hits[0].matched


def test_search_command_text_json_and_stdin(capsys, monkeypatch):
    text = (GPU / "nccl_timeout" / "stderr.rank0.txt").read_text()
    assert main(["recipes", "--search", text]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[1] == "nccl-watchdog-timeout"
    assert 'matched "Watchdog caught collective operation timeout"' in out
    assert out.rstrip().endswith("mldebug recipes nccl-watchdog-timeout")
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    assert main(["recipes", "--search", "-", "--json"]) == 0
    results = json.loads(capsys.readouterr().out)["results"]
    assert results[0]["id"] == "nccl-watchdog-timeout"
    assert results[0]["score"] > results[1]["score"] > 0
    assert "last enqueued work" in results[0]["matched"]
    assert main(["recipes", "--search", "zzqx qqzz"]) == 0
    assert "No recipe matches" in capsys.readouterr().out
    assert main(["recipes", "cuda-oom", "--search", "x"]) == 2


def test_search_reads_a_bounded_stdin(monkeypatch, capsys):
    from mldebug.recipes.search import MAX_QUERY_CHARS

    class Endless(io.StringIO):
        def read(self, size=-1):
            assert 0 < size <= MAX_QUERY_CHARS  # never "read everything"
            return "CUDA out of memory " * (size // 19)

    monkeypatch.setattr(sys, "stdin", Endless())
    assert main(["recipes", "--search", "-", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["results"][0]["id"] == "cuda-oom"


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=2000))
def test_search_never_crashes_on_arbitrary_text(text):
    from mldebug.recipes.search import search

    hits = search(text)
    assert all(hit.score > 0 for hit in hits)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
