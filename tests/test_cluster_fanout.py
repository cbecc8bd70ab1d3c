"""The bounded fan-out under `--hosts`/`--slurm`, with real processes: what a command said
before its deadline is kept, it is killed at the deadline (its children too), at most
`parallel` run at once, and nothing is started once the overall deadline has passed."""

from __future__ import annotations

import sys
import time

import pytest

from mldebug.cluster import fanout
from mldebug.cluster.fanout import MAX_BYTES, NODE_BYTES, bytes_for, run_many, run_one

PY = sys.executable


def test_a_command_past_its_deadline_is_killed_and_keeps_what_it_said(tmp_path):
    child = tmp_path / "child.pid"
    script = (
        "import subprocess, sys, time\n"
        f"p = subprocess.Popen(['sleep', '60']); open({str(child)!r}, 'w').write(str(p.pid))\n"
        "print('{\"node\": 1}', flush=True); time.sleep(60)\n"
    )
    answer = run_one("n1", [PY, "-c", script], deadline=3)
    assert answer.lines == (b'{"node": 1}\n',)
    assert answer.returncode is None and answer.error == "no answer within 3 s"
    pid = int(child.read_text())
    # The whole process group went: no sleeping child left behind (gone, or a zombie once
    # the kernel has delivered the SIGKILL, which on a loaded machine takes a moment).
    deadline = time.monotonic() + 10
    state = "?"
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                state = stat.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            state = "gone"
        if state in ("Z", "X", "gone"):
            break
        time.sleep(0.05)
    assert state in ("Z", "X", "gone"), state


def test_a_command_that_cannot_start_says_why():
    answer = run_one("n1", ["/nonexistent/ssh", "x"], deadline=5)
    assert answer.returncode is None and "could not start /nonexistent/ssh" in answer.error


def test_at_most_parallel_commands_run_at_once(tmp_path):
    log = tmp_path / "log"
    script = (
        "import fcntl, sys, time\n"
        "def note(word):\n"
        f"    with open({str(log)!r}, 'a') as f:\n"
        "        fcntl.flock(f, fcntl.LOCK_EX); f.write(word + '\\n')\n"
        "note('start'); time.sleep(0.5); note('end')\n"
    )
    answers = run_many([(f"n{i}", [PY, "-c", script]) for i in range(6)], deadline=60, parallel=2)
    assert [a.key for a in answers] == [f"n{i}" for i in range(6)]
    assert all(a.returncode == 0 for a in answers), [a.stderr for a in answers]
    running = most = 0
    for word in log.read_text().split():
        running += 1 if word == "start" else -1
        most = max(most, running)
    assert most <= 2


def test_nothing_starts_after_the_overall_deadline():
    commands = [(f"n{i}", ["sleep", "5"]) for i in range(3)]
    answers = run_many(commands, deadline=1, parallel=1, total=1.5)
    assert answers[0].error == "no answer within 1 s"
    assert answers[-1].error == "not tried: the overall deadline had passed"


def test_output_past_its_cap_is_left_out_and_counted():
    # srun passes on every node's document in one stream: past the cap, lines are counted,
    # not kept (the front end names those nodes, it does not take them for silent ones).
    script = 'for n in range(5): print(\'{"node": %d, "pad": "%s"}\' % (n, \'x\' * 100))'
    answer = run_one("srun", [PY, "-c", script], deadline=30, max_bytes=300)
    assert [line[:11] for line in answer.lines] == [b'{"node": 0,', b'{"node": 1,']
    assert (answer.returncode, answer.dropped) == (0, 3)
    assert bytes_for(1024) == 1024 * NODE_BYTES and bytes_for(1) == MAX_BYTES


def test_lines_handed_on_as_they_come_are_never_cut_and_never_kept(monkeypatch):
    # what srun passes on for the largest jobs: more than the cap on what is kept
    monkeypatch.setattr(fanout, "MAX_BYTES", 1000)
    script = "for i in range(500): print('{\"node\": %d}' % i)\n"
    seen: list[bytes] = []
    answer = run_one("srun", [PY, "-c", script], deadline=60, each_line=seen.append)
    assert answer.returncode == 0 and answer.lines == ()
    assert seen == [b'{"node": %d}\n' % i for i in range(500)]
    kept = run_one("srun", [PY, "-c", script], deadline=60)
    assert sum(map(len, kept.lines)) <= 1000 < sum(map(len, seen))  # kept: cut at the cap


def test_what_the_line_reader_raises_is_raised_once_the_command_ended():
    # the command is not left blocked on a full pipe: the rest is drained unread
    script = "import sys\nfor i in range(200000): sys.stdout.write('x' * 99 + '\\n')\n"
    seen: list[bytes] = []

    def take(line: bytes) -> None:
        seen.append(line)
        if len(seen) == 3:
            raise ValueError("a bug in the reader")

    started = time.monotonic()
    with pytest.raises(ValueError, match="a bug in the reader"):
        run_one("srun", [PY, "-c", script], deadline=60, each_line=take)
    assert len(seen) == 3 and time.monotonic() - started < 50
