"""A stand-in for the in-rank agent, for test jobs and benchmarks: it writes
ranks/<rank>/state.json exactly as docs/agent.md says the agent does (version 1, heartbeat
`time`, `step`, per group the last call made and the last completed, the trace), so the
readers (`mldebug run`'s watchdog and first-failure report, the live view) can be tested
before the real agent (mldebug/agent/) writes them, and against the same contract after.

    agent = ContractAgent.unless_real(rank)   # None when the real agent writes state.json
    agent.before("all_reduce")                # the call on the *next* line of the caller
    dist.all_reduce(t)
    agent.after()
    agent.step()                              # what mldebug.step() counts

Stdlib only.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

HEARTBEAT = 0.5


def state_path(rank: int) -> str:
    return os.path.join(os.environ["MLDEBUG_RUN_DIR"], "ranks", str(rank), "state.json")


class ContractAgent:
    def __init__(self, rank: int, group: str = "default_pg", size: int | None = None):
        self.rank, self.group, self.size = rank, group, size
        self.path = state_path(rank)
        self.started = time.time()
        self.steps: int | None = None
        self.step_time: float | None = None
        self.seq = 0
        self.enqueued: dict | None = None
        self.completed: dict | None = None
        self.trace: list[dict] = []
        self.lock = threading.Lock()
        self.write()
        threading.Thread(target=self._beat, daemon=True).start()

    @classmethod
    def unless_real(cls, rank: int, wait: float = 3.0, **kwargs) -> ContractAgent | None:
        """None when a real agent writes this rank's state.json (it shows within `wait`
        seconds: it beats once a second), else a stand-in that does."""
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if os.path.exists(state_path(rank)):
                return None
            time.sleep(0.1)
        return cls(rank, **kwargs)

    def _beat(self) -> None:
        while True:
            time.sleep(HEARTBEAT)
            self.write()

    def write(self) -> None:
        with self.lock:
            group = {"size": self.size, "enqueued": self.enqueued, "completed": self.completed}
            data = {
                "version": 1,
                "rank": self.rank,
                "pid": os.getpid(),
                "time": time.time(),
                "started": self.started,
                "step": self.steps,
                "step_time": self.step_time,
                "groups": {self.group: group} if self.enqueued else {},
                "trace": self.trace[-64:],
                "memory": {"rss": 0, "cuda": None, "nvml": None},
                "memory_history": [],
            }
            tmp = f"{self.path}.{os.getpid()}.tmp"
            with open(tmp, "w") as handle:
                json.dump(data, handle)
            os.replace(tmp, self.path)

    def before(self, op: str) -> None:
        caller = sys._getframe(1)
        site = f"{caller.f_code.co_filename}:{caller.f_lineno + 1}"
        now = time.time()
        with self.lock:
            self.seq += 1
            self.enqueued = {"seq": self.seq, "op": op, "time": now, "site": site}
            self.trace.append(
                {
                    "group": self.group,
                    "seq": self.seq,
                    "op": op,
                    "site": site,
                    "enqueued": now,
                    "completed": None,
                    "async": False,
                    "shapes": [],
                    "dtypes": [],
                }
            )
        self.write()

    def after(self) -> None:
        now = time.time()
        with self.lock:
            self.trace[-1]["completed"] = now
            self.completed = {"seq": self.seq, "op": self.trace[-1]["op"], "time": now}
        self.write()

    def step(self) -> None:
        with self.lock:
            self.steps = (self.steps or 0) + 1
            self.step_time = time.time()
