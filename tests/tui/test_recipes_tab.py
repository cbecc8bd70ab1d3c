"""The Recipes tab: a finding's recipe opens in it, and its search box ranks the recipes by
what the user types or pastes. Driven with Pilot over snapshots made by the real analysis."""

from __future__ import annotations

import threading

from testkit.tui_fakes import FIXED_TIME, OUTLIER, FakePoller, samples_of
from textual.widgets import Input, Markdown, OptionList, TabbedContent

from mldebug.analysis.snapshot import build_snapshot
from mldebug.commands.attach import live_app
from mldebug.model import KIND_STUCK, RankTarget
from mldebug.tui.widgets.recipes_view import RecipesView

SLOW_TIMER = 3600
WATCHDOG = (
    "[rank0]:[E1201 00:23:43.367818701 ProcessGroupNCCL.cpp:689] [Rank 0] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=1048576, "
    "NumelOut=1048576, Timeout(ms)=15000) ran for 15080 milliseconds before timing out."
)


def stuck_job(tick: int = 0):
    """Every rank idle in the user's code, in no collective: the analysis says `stuck`."""
    targets, samples = [], {}
    for rank in range(2):
        target = RankTarget(pid=20_000 + rank, rank=rank, world_size=2, host="node0", job="j")
        targets.append(target)
        samples[target.pid] = samples_of(target, OUTLIER, False, 512 * 2**20, 0)
    return build_snapshot(targets, samples, world_size=2, job="j", now=FIXED_TIME + 1)


async def settle(app, pilot) -> None:
    await app.workers.wait_for_complete()
    await pilot.pause()


async def searched(view: RecipesView, pilot) -> None:
    """Wait for the search of what the box says now to be shown (it runs once the box has
    been still a moment, off the screen's thread)."""
    await pilot.pause()  # the box's change message is handled: the search is asked for
    for _ in range(400):
        if not view.searching:
            break
        await pilot.pause(0.025)
    assert not view.searching
    await view.app.workers.wait_for_complete()
    await pilot.pause()


async def test_r_opens_the_recipe_of_a_stuck_rank_finding():
    snapshot = stuck_job()
    assert snapshot.findings[0].kind == KIND_STUCK  # the real analysis, not a made-up finding
    app = live_app(FakePoller(lambda tick: stuck_job(tick)), interval=SLOW_TIMER)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        await pilot.press("r")
        await pilot.pause()
        assert app.query_one(TabbedContent).active == "recipes"
        view = app.query_one(RecipesView)
        assert view.current == "stuck-rank"
        await app.workers.wait_for_complete()
        assert view.query_one("#recipe-body", Markdown).source.startswith(
            "# A rank does not move, outside any collective"
        )


async def test_pasting_an_error_ranks_the_recipes_and_opens_the_best(poller):
    app = live_app(poller, interval=SLOW_TIMER)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        await pilot.press("6")
        view = app.query_one(RecipesView)
        box = view.query_one("#recipe-search", Input)
        box.focus()
        await pilot.pause()
        box.value = WATCHDOG  # as a paste lands
        await searched(view, pilot)
        listing = view.query_one("#recipe-list", OptionList)
        assert view.current == "nccl-watchdog-timeout"
        assert listing.get_option_at_index(0).id == "nccl-watchdog-timeout"
        assert listing.option_count < len(view.all_recipes)  # only the matching ones
        # keys go to the box (not the app's bindings)
        box.value = ""
        await pilot.press(*"cuda")
        await pilot.pause()
        assert box.value == "cuda"
        # fast typing: every key a new search and a new document while the last is drawn
        box.value = ""
        await pilot.press(*"CUDA out of memory")
        await searched(view, pilot)
        assert view.current == "cuda-oom"
        await app.workers.wait_for_complete()
        body = view.query_one("#recipe-body", Markdown)
        # one document, the last one asked for, however fast the keys came
        assert body.source.startswith("# CUDA out of memory")
        headings = [
            str(h.content) if hasattr(h, "content") else "" for h in body.query("MarkdownH1")
        ]
        assert len(body.query("MarkdownH1")) == 1, headings
        await pilot.press("escape")
        assert app.focused is listing
        box.value = "zzqx qqzz"  # nothing matches: says so, the list is empty
        await searched(view, pilot)
        await app.workers.wait_for_complete()
        assert listing.option_count == 0 and view.current is None
        assert body.source.startswith("No recipe matches")
        box.value = ""
        await searched(view, pilot)
        assert listing.option_count == len(view.all_recipes) and view.current is not None


async def test_a_finding_recipe_hidden_by_a_search_still_opens(poller):
    app = live_app(poller, interval=SLOW_TIMER)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        await pilot.press("6")
        view = app.query_one(RecipesView)
        view.query_one("#recipe-search", Input).value = "cuda out of memory"
        await searched(view, pilot)
        assert "rank-outside-collective" not in {r.id for r in view.recipes}
        view.query_one("#recipe-list", OptionList).focus()
        await pilot.press("r")  # the banner's finding: rank-outside-collective
        await pilot.pause()
        assert view.current == "rank-outside-collective"
        assert view.query_one("#recipe-search", Input).value == ""
        assert len(view.recipes) == len(view.all_recipes)


def test_snapshot_of_a_searched_recipes_tab(snap_compare, monkeypatch):
    # The screen a user reaches: tab 6, `/`, an error line typed; the best recipe open.
    monkeypatch.setenv("TZ", "UTC")

    async def run_before(pilot) -> None:
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        await pilot.press("6", "slash")
        pilot.app.query_one("#recipe-search", Input).cursor_blink = False  # one picture, always
        await pilot.press(*"Duplicate GPU detected")
        await searched(pilot.app.query_one(RecipesView), pilot)
        await pilot.pause()

    app = live_app(FakePoller(), interval=SLOW_TIMER, job_name="train.py")
    assert snap_compare(app, terminal_size=(120, 36), run_before=run_before)


async def test_a_slow_paste_reader_never_holds_up_a_key_and_the_last_text_wins(poller):
    asked: list[str] = []
    gate = threading.Event()

    def slow_reader(text: str) -> list[str]:  # a long pasted log takes a while to read
        asked.append(text)
        gate.wait(timeout=20)
        return ["cuda-oom"] if "memory" in text else []

    app = live_app(poller, interval=SLOW_TIMER, read_paste=slow_reader)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        await pilot.press("6", "slash", *"out of memory")
        view = app.query_one(RecipesView)
        for _ in range(400):  # the reader has started, and holds on
            if asked:
                break
            await pilot.pause(0.025)
        assert asked and view.searching
        await pilot.press(*" now")  # keys land while the reader is still busy
        box = app.query_one("#recipe-search", Input)
        assert box.value == "out of memory now"
        gate.set()
        await searched(view, pilot)
        assert asked[-1] == "out of memory now"  # the text the box settled on was searched
        assert view.current == "cuda-oom" and box.value == "out of memory now"
