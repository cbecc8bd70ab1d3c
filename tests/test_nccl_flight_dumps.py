"""`mldebug run --flight-recorder`: the request file and the agent's dumps into <run>/fr/.

The agent's `FlightDumps` is given, in place of torch's `_dump_fr_trace`, a stand-in that
returns a real recorded dump's bytes (tests/data/flight/behind/comm_lib_trace_rank_1) and
counts its calls; the real torch call is exercised by tests/test_nccl_flight_live.py.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from mldebug.agent import eventlog
from mldebug.agent.flight import FlightDumps
from mldebug.files import safeio
from mldebug.flight import read_flight_dump
from mldebug.launch import env as envs
from mldebug.launch.flight import request_dumps, wait_for_dumps

FLIGHT = Path(__file__).parent / "data" / "flight"  # recorded Flight Recorder dumps

REAL = (FLIGHT / "behind" / "comm_lib_trace_rank_1").read_bytes()


@pytest.fixture
def event_log(tmp_path, monkeypatch):
    path = tmp_path / "events.jsonl"
    monkeypatch.setattr(eventlog, "_writer", None)
    monkeypatch.setattr(eventlog, "_failed", set())
    monkeypatch.setattr(eventlog, "_faults", frozenset())
    eventlog.configure(path, 0, safeio.open_append, lambda: 3)
    return lambda: [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


class Torch:
    """torch's dump as the agent finds it: None until torch.distributed is initialised."""

    def __init__(self, data: bytes = REAL, error: Exception | None = None):
        self.ready = True
        self.calls: list[dict] = []
        self.data, self.error = data, error

    def dumper(self):
        if not self.ready:
            return None

        def dump(**options):
            self.calls.append(options)
            if self.error is not None:
                raise self.error
            return self.data

        return dump


@pytest.fixture
def fr(tmp_path):
    return safeio.make_private_dir(tmp_path / "fr")


def test_no_request_no_dump_and_a_request_is_served_once(fr):
    torch = Torch()
    dumps = FlightDumps(str(fr), 1, dumper=torch.dumper)
    assert not dumps.check() and torch.calls == []
    assert request_dumps(fr.parent) == fr
    assert dumps.check()
    assert (fr / "rank_1").read_bytes() == REAL
    assert oct((fr / "rank_1").stat().st_mode & 0o777) == "0o600"
    assert torch.calls == [
        {"includeCollectives": True, "includeStackTraces": True, "onlyActive": False}
    ]
    assert not dumps.check() and len(torch.calls) == 1  # the same request: served
    assert sorted(os.listdir(fr)) == ["rank_1", "request"]  # no temporary file left
    dump = read_flight_dump(str(fr / "rank_1"))
    assert dump.rank == 1 and dump.entries


def test_each_new_request_gets_a_new_dump_even_within_one_clock_tick(fr):
    torch = Torch()
    dumps = FlightDumps(str(fr), 0, dumper=torch.dumper)
    for _ in range(3):
        request_dumps(fr.parent)
        assert dumps.check()
    assert len(torch.calls) == 3
    (fr / "request").touch()  # a user's `touch <run>/fr/request` on the existing file
    os.utime(fr / "request", ns=(time.time_ns() + 10**9,) * 2)
    assert dumps.check() and len(torch.calls) == 4


def test_a_request_before_torch_distributed_is_initialised_waits_for_it(fr):
    torch = Torch()
    torch.ready = False
    dumps = FlightDumps(str(fr), 0, dumper=torch.dumper)
    request_dumps(fr.parent)
    assert not dumps.check() and not (fr / "rank_0").exists()
    torch.ready = True
    assert dumps.check() and (fr / "rank_0").exists()


def test_a_symlink_as_request_is_no_request_and_one_at_the_dump_is_replaced_not_followed(
    fr, tmp_path
):
    torch = Torch()
    dumps = FlightDumps(str(fr), 0, dumper=torch.dumper)
    target = tmp_path / "elsewhere"
    target.write_text("keep me")
    (fr / "request").symlink_to(target)
    assert not dumps.check()
    (fr / "request").unlink()
    (fr / "rank_0").symlink_to(target)
    request_dumps(fr.parent)
    assert dumps.check()
    assert target.read_text() == "keep me" and not (fr / "rank_0").is_symlink()


def test_a_failing_dump_is_said_once_and_the_part_stands_aside(fr, event_log):
    torch = Torch(error=RuntimeError("no recorder"))
    dumps = FlightDumps(str(fr), 0, dumper=torch.dumper)
    request_dumps(fr.parent)
    assert not dumps.check() and dumps.off
    request_dumps(fr.parent)
    assert not dumps.check() and len(torch.calls) == 1
    (event,) = event_log()
    assert event["part"] == "flight_recorder_dumps" and "no recorder" in event["message"]
    assert os.listdir(fr) == ["request"]


def test_without_flight_recorder_the_part_is_off_and_nothing_is_asked(tmp_path):
    torch = Torch()
    dumps = FlightDumps(None, 0, dumper=torch.dumper)
    assert dumps.off and not dumps.check() and torch.calls == []
    assert request_dumps(tmp_path) is None  # a run without fr/
    (tmp_path / "fr").symlink_to(tmp_path)
    assert request_dumps(tmp_path) is None


def test_the_ranks_are_told_where_to_dump(tmp_path):
    env = envs.flight_recorder_env(tmp_path, True)
    assert env["MLDEBUG_FR_DIR"] == f"{tmp_path}/fr"
    assert env["TORCH_FR_DUMP_TEMP_FILE"] == f"{tmp_path}/fr/rank_"  # torch's own: same names


def test_waiting_for_dumps_returns_the_ranks_that_wrote_since_the_request(fr):
    since = time.time() - 1
    (fr / "rank_0").write_bytes(REAL)
    started = time.monotonic()
    assert wait_for_dumps(fr, [0, 1], since, timeout=0.3) == {0}
    assert time.monotonic() - started >= 0.3
    (fr / "rank_1").write_bytes(REAL)
    assert wait_for_dumps(fr, [0, 1], since, timeout=30) == {0, 1}
    assert wait_for_dumps(fr, [0, 1], time.time() + 60, timeout=0) == set()
