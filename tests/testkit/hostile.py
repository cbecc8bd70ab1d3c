"""Hostile text from ranks and files: the strings (markup, escapes, control characters) a
rank may write, and a job whose every outside string carries one, judged by the real
analysis."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import strategies as st

from mldebug.analysis.snapshot import build_snapshot
from mldebug.collect.crashes import read_crashes
from mldebug.model import (
    FAIL_PERMISSION,
    Frame,
    JobSnapshot,
    RankTarget,
    StackSample,
    ThreadStack,
)

C10D = "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"
WORLD = 4

# name: (what a rank wrote, what a person must see of it)
HOSTILE = {
    "closing tag that is a path": (
        "no shard found at [/data/train/shard1]",
        "no shard found at [/data/train/shard1]",
    ),
    "link": ("[link=https://evil.example]click[/link]", "[link=https://evil.example]click[/link]"),
    "blink": ("[blink]epoch 3[/blink]", "[blink]epoch 3[/blink]"),
    "bare closing tag": ("a[/]b", "a[/]b"),
    "unclosed tag": ("[bold unclosed", "[bold unclosed"),
    "textual action": ("[@click=app.quit]quit[/]", "[@click=app.quit]quit[/]"),
    "style word": ("[red]not red[/red]", "[red]not red[/red]"),
    "emoji code": (":warning: disk", ":warning: disk"),
    "escaped bracket": ("a \\[b] c", "a \\[b] c"),
    "clear screen": ("before\x1b[2J\x1b[Hafter", "beforeafter"),
    "colour": ("\x1b[31mred\x1b[0m plain", "red plain"),
    "window title": ("\x1b]0;pwned\x07titled", "titled"),
    "hyperlink": ("\x1b]8;;https://evil.example\x1b\\link\x1b]8;;\x1b\\ text", "link text"),
    "8-bit CSI": ("x\x9b31my", "xy"),
    "carriage return": ("progress 10%\rprogress 99%", "progress 10%progress 99%"),
    "NUL and bell": ("nul\x00byte\x07", "nulbyte"),
    "backspace": ("abc\x08\x08xy", "abcxy"),
    "bidi override": ("abc\u202edcba", "abcdcba"),
    "wide characters": ("漢字 [x] é", "漢字 [x] é"),
}

# For the property: visible pieces (markup-like or not) and whole control sequences. What a
# person must see is the visible pieces alone, in order.
VISIBLE_PIECES = ["[", "]", "[/]", "[link=x]", "[bold", "[/bold]", "[@click=app.bell]", ":x:", "\\"]
CONTROL_PIECES = [
    "\x1b[2J",
    "\x1b[31;1m",
    "\x1b]0;title\x07",
    "\x1b]8;;http://x\x1b\\",
    "\x9b2J",
    "\x1bc",
    "\x00",
    "\x07",
    "\x7f",
    "\r",
    "\u202e",
]
_VISIBLE = st.one_of(
    st.sampled_from(VISIBLE_PIECES),
    st.text(st.sampled_from("ab[]/=@:.-é漢"), min_size=1, max_size=6),
)
_TOKEN = st.one_of(
    _VISIBLE.map(lambda s: (s, True)), st.sampled_from(CONTROL_PIECES).map(lambda s: (s, False))
)


@st.composite
def hostile_text(draw) -> tuple[str, str]:
    """(raw, visible): raw mixes visible pieces and control sequences; starts and ends with
    a letter so that no layout trims it."""
    tokens = draw(st.lists(_TOKEN, min_size=1, max_size=10))
    raw = "a" + "".join(text for text, _ in tokens) + "z"
    visible = "a" + "".join(text for text, shown in tokens if shown) + "z"
    return raw, visible


def user_file(text: str) -> str:
    return f"/job/{text}.py"


def hostile_job(text: str, run_dir: Path) -> JobSnapshot:
    """Four ranks, every string from outside carrying `text`:

    rank 0 is busy in user code elsewhere (its function, file and thread names carry it),
    rank 1 waits in all_reduce for it, rank 2 crashed (error.json's type, message and
    location carry it, read back by read_crashes), rank 3 could not be read (py-spy's error
    carries it). Every rank's host carries it, and so does the job's run directory.
    """
    errors = run_dir / "ranks" / "2"
    errors.mkdir(parents=True, exist_ok=True)
    (errors / "error.json").write_text(
        json.dumps(
            {
                "time": 5.0,
                "type": f"{text}Error",
                "message": f"no shard at {text}",
                "location": f"{user_file(text)}:7",
            }
        )
    )
    mine = Frame(text, user_file(text), 12)
    outer = Frame("<module>", user_file(text), 3)
    waiting = (outer, Frame("step", user_file(text), 40), Frame("all_reduce", C10D, 3000))
    stacks = {0: ((outer, mine), (outer, mine, Frame("inner", user_file(text), 20))), 1: waiting}
    targets, by_pid = [], {}
    for rank in range(WORLD):
        target = RankTarget(pid=4000 + rank, rank=rank, world_size=WORLD, host=f"node {text}")
        targets.append(target)
        if rank == 2:
            continue  # exited: no process, no samples
        rank_samples = []
        for index in range(3):
            if rank == 3:
                sample = StackSample(
                    target, 100.0 + index, failure=FAIL_PERMISSION, failure_detail=f"py-spy: {text}"
                )
            else:
                frames = stacks[rank][index % 2] if rank == 0 else stacks[rank]
                threads = (
                    ThreadStack(1, f"main {text}", frames, os_thread_id=9000 + rank),
                    ThreadStack(2, text, (Frame("wait", user_file(text), 5),)),
                )
                cpu = 100.0 + (index if rank == 0 else 0.0)
                sample = StackSample(
                    target, 100.0 + index, threads, cpu_seconds=cpu, main_cpu_seconds=cpu
                )
            rank_samples.append(sample)
        by_pid[target.pid] = rank_samples
    crashes = read_crashes(run_dir, manifest={})
    return build_snapshot(
        [t for t in targets if t.rank != 2],
        by_pid,
        world_size=WORLD,
        job=f"job {text}",
        run_dir=f"/runs/{text}",
        exit_codes={2: 1},
        now=1_767_225_600.0,
        crashes=crashes,
    )


CONTROLS = ("\x1b", "\x9b", "\x9d", "\x07", "\x00", "\r", "\x08", "\x7f", "\u202e")


def assert_no_control(output: str) -> None:
    found = sorted({repr(c) for c in CONTROLS if c in output})
    assert not found, f"control characters reached the output: {found}"
