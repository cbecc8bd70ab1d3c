"""`mldebug run`: one console line when the job's steps got slower and stayed slower.

A daemon thread reads the ranks' state.json every CHECK_EVERY seconds (the straggler check's
reading, when it is recent: launch/stragglers.py SharedViews) and looks for a
lasting slowdown in their step history (analysis/change.py), a warning (WARN_RATIO). When the same change (the same
ranks, from about the same step) is found at PERSIST checks in a row, it says so once on the
console and appends a `slowdown` event to each named rank's events.jsonl. A later change (a
new step, or other ranks) is news again. MLDEBUG_CHANGE=0 turns it off (the finding stays in
`mldebug dump`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping

from mldebug.analysis.change import change_finding
from mldebug.files.rundir import RunPaths
from mldebug.launch.stragglers import RANKS_A_SECOND, SharedViews, read_views, record_finding
from mldebug.model import SEVERITY_WARNING, Finding, RankView
from mldebug.wording import finding_text

ENV_CHANGE = "MLDEBUG_CHANGE"
CHECK_EVERY = 2.0
PERSIST = 2  # checks in a row that find the same change
SAME_STEPS = 64  # two checks' change points this close are one change...
SAME_SHARE = 0.2  # ...or this close as a share of the step
SILENCE = f"{ENV_CHANGE}=0 silences this line"


def enabled(env: Mapping[str, str]) -> bool:
    return env.get(ENV_CHANGE, "1").strip().lower() not in ("0", "off", "no", "false")


def _key(finding: Finding) -> tuple:
    """What makes two checks' findings the same change: the ranks and where it began."""
    since = dict(finding.facts).get("since", "")
    digits = "".join(ch for ch in since if ch.isdigit())
    return finding.ranks, int(digits) if digits else None


def _same(one: tuple | None, other: tuple | None) -> bool:
    """The same change, placed by two checks: the same ranks, from about the same step
    (later checks may move it by a few blocks, more on a long run's merged rows)."""
    if one is None or other is None or one[0] != other[0]:
        return False
    if one[1] is None or other[1] is None:
        return one[1] == other[1]
    return abs(one[1] - other[1]) <= max(SAME_STEPS, SAME_SHARE * max(one[1], other[1]))


class ChangeWatch:
    def __init__(
        self,
        paths: RunPaths,
        say: Callable[[str], None],
        check_every: float = CHECK_EVERY,
        persist: int = PERSIST,
        shared: SharedViews | None = None,
    ) -> None:
        self.paths = paths
        self._say = say
        self.check_every = check_every
        self.persist = persist
        self.shared = shared if shared is not None else SharedViews(paths)
        self._seen: tuple | None = None
        self._count = 0
        self._said: list[tuple] = []
        self.said: list[str] = []
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mldebug-changes", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._closed.set()

    def _run(self) -> None:
        while not self._closed.wait(self.check_every):
            ranks = len(self.paths.rank_ids())
            self.check_every = max(self.check_every, ranks / RANKS_A_SECOND)
            try:
                self.check(self.shared.views(0.9 * self.check_every))
            except Exception as error:  # never the job's end, nor a traceback on its console
                self._say(f"mldebug: the slowdown check stops ({type(error).__name__}: {error})")
                return

    def check(self, views: list[RankView] | None = None) -> str | None:
        """One check, of `views` (else the states read now)."""
        finding = change_finding(read_views(self.paths) if views is None else views)
        if finding is not None and finding.severity != SEVERITY_WARNING:
            finding = None  # a change under WARN_RATIO stays in `dump`, off the console
        key = _key(finding) if finding is not None else None
        self._count = self._count + 1 if _same(key, self._seen) else 1
        self._seen = key
        if finding is None or key is None or self._count < self.persist:
            return None
        if any(_same(key, said) for said in self._said):
            return None
        self._said.append(key)
        line = f"mldebug: {finding_text(finding)} (mldebug recipes {finding.recipe}; {SILENCE})"
        self.said.append(line)
        self._say(line)
        record_finding(self.paths, finding)
        return line
