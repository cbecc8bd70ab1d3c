"""The live view with the ranks' in-rank agents: step and heartbeat columns once some rank has
an agent state, the waiting ranks and the culprit by sequence number, and each group's
progress on a rank's screen. The agent states stand in for state.json files (docs/agent.md);
the snapshots come from the real analysis (build_snapshot)."""

from __future__ import annotations

from testkit.tui_fakes import FIXED_TIME, MAIN, SCRIPT, TRAIN, FakePoller, samples_of
from textual.widgets import DataTable

from mldebug.analysis.snapshot import build_snapshot
from mldebug.commands.attach import live_app
from mldebug.model import AgentState, CollectiveCall, Frame, GroupProgress, RankTarget
from mldebug.tui.screens.rank_screen import RankScreen
from mldebug.tui.widgets.findings_banner import FindingsBanner
from mldebug.tui.widgets.rank_detail import RankDetail
from mldebug.tui.widgets.rank_table import RankTable

SLOW_TIMER = 3600
SITE = f"{SCRIPT}:48"
# Spinning at loss.item() while the NCCL all_reduce made before does not complete.
SPIN = (MAIN, TRAIN, Frame("item", "/venv/lib/python3.11/site-packages/torch/_tensor.py", 1))
LOAD = (MAIN, Frame("load_batch", SCRIPT, 31))


def agent(rank: int, made: int, now: float) -> AgentState:
    call = CollectiveCall("default_pg", made, "all_reduce", SITE, enqueued=now - 30)
    done = CollectiveCall("default_pg", 37, "all_reduce", SITE, completed=now - 31)
    return AgentState(
        rank=rank,
        pid=10_000 + rank,
        time=now - 1,
        step=12 + rank,
        groups=(GroupProgress("default_pg", 4, call, done),),
        trace=(call,),
    )


def nccl_job(tick: int, with_agents: bool = True):
    """Ranks 0, 1, 3 made all_reduce #38 and spin; rank 2 never made it. The stacks alone
    read as a working job; `with_agents` adds what the agents say."""
    now = FIXED_TIME + tick + 1
    targets, samples, agents = [], {}, {}
    for rank in range(4):
        target = RankTarget(pid=10_000 + rank, rank=rank, world_size=4, host="node0", job="f")
        targets.append(target)
        frames = LOAD if rank == 2 else SPIN
        samples[target.pid] = samples_of(target, frames, True, 512 * 2**20, tick)
        agents[target.pid] = agent(rank, 37 if rank == 2 else 38, now)
    return build_snapshot(
        targets, samples, 4, job="f", now=now, agents=agents if with_agents else None
    )


def header(table: DataTable) -> list[str]:
    return [str(column.label) for column in table.columns.values()]


async def test_step_and_heartbeat_columns_appear_with_the_agents():
    # GIVEN a job first seen without agent states, then with them
    poller = FakePoller(lambda tick: nccl_job(tick, with_agents=tick > 0))
    app = live_app(poller, interval=SLOW_TIMER)
    async with app.run_test(size=(140, 40)) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        table = app.query_one(RankTable)
        # THEN no column promises what nothing reads, and the spinning ranks look busy
        assert "step" not in header(table) and "hb age" not in header(table)
        assert [str(table.get_row(str(r))[1]) for r in range(4)] == ["running"] * 4
        # WHEN the agents' states come
        app.request_poll()
        await app.workers.wait_for_complete()
        await pilot.pause()
        # THEN the columns are there, filled, and the spinning ranks wait
        assert header(table)[:6] == [
            "rank",
            "state",
            "current frame",
            "collective",
            "step",
            "hb age",
        ]
        row = [str(cell) for cell in table.get_row("0")]
        assert row[1] == "waiting" and row[3] == "all_reduce"
        assert row[4:6] == ["12", "1s"]
        assert [str(cell) for cell in table.get_row("2")][1:5] == [
            "running",
            "train.py:31 load_batch",
            "-",
            "14",
        ]
        banner = " ".join(str(app.query_one(FindingsBanner).render()).split())
        assert f"rank 2 never called all_reduce #38 ({SITE})" in banner
        assert "ranks 0-1,3 wait for it" in banner


async def test_a_ranks_screen_shows_its_step_heartbeat_and_group_progress():
    app = live_app(FakePoller(nccl_job), interval=SLOW_TIMER)
    async with app.run_test(size=(120, 40)) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        await pilot.press("enter")  # rank 0
        assert isinstance(app.screen, RankScreen) and app.screen.rank == 0
        text = app.screen.query_one(RankDetail).text
        assert "step 12  heartbeat 1s" in text
        assert f"default_pg: made all_reduce #38 ({SITE}), complete up to #37" in text
        assert "its agent: made all_reduce #38, not complete after 29 s" in text
