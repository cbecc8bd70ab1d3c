"""The live view: polls in a worker thread, draws each new snapshot, never blocks on a rank."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from rich.text import Text
from textual import work
from textual.app import App, ComposeResult, SystemCommand
from textual.await_complete import AwaitComplete
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, Header, Input, Static, TabbedContent, TabPane
from textual.worker import get_current_worker

from mldebug.errors import MldebugError
from mldebug.model import JobSnapshot, RunFiles
from mldebug.ranges import format_ranks
from mldebug.rankrules import frame_label
from mldebug.textsafe import one_line
from mldebug.tui.feeds import NoSources, Poller, RunFilesFeed, SourceFeed
from mldebug.tui.messages import PollFailed, ReportSaved, ShowRank, ShowRecipe, SnapshotReady
from mldebug.tui.reportfile import write_report
from mldebug.tui.screens.quit_screen import STOP, QuitScreen
from mldebug.tui.screens.rank_screen import RankScreen
from mldebug.tui.status import status_text
from mldebug.tui.widgets.anomalies_view import AnomaliesView
from mldebug.tui.widgets.findings_banner import FindingsBanner
from mldebug.tui.widgets.logs_view import LogsView
from mldebug.tui.widgets.memory_view import CensusAsked, MemoryView
from mldebug.tui.widgets.nccl_view import NcclView
from mldebug.tui.widgets.rank_table import RankTable
from mldebug.tui.widgets.recipes_view import RecipesView
from mldebug.tui.widgets.stack_tree import StackTree
from mldebug.tui.widgets.timing_view import TimingView
from mldebug.tui.widgets.view_tabs import ViewTabs

TABS = ("overview", "anomalies", "memory", "nccl", "logs", "recipes", "timing")


class AttachApp(App[int]):
    CSS_PATH = "app.tcss"
    TITLE = "mldebug attach"
    BINDINGS = [
        Binding("q", "quit_app", "Quit"),
        Binding("ctrl+q", "quit_app", "Quit", show=False, priority=True),
        Binding("p", "toggle_pause", "Pause"),
        Binding("s", "save_report", "Snapshot"),
        Binding("slash", "filter", "Filter ranks"),
        Binding("escape", "leave_input", "Back to the table", show=False),
        Binding("r", "open_recipe", "Recipe"),
        Binding("question_mark", "toggle_help", "Keys"),
        *(
            Binding(str(i + 1), f"tab('{tab}')", tab.title(), show=False)
            for i, tab in enumerate(TABS)
        ),
    ]

    def __init__(
        self,
        poller: Poller,
        *,
        interval: float = 1.0,
        run_dir: Path | None = None,
        files: RunFilesFeed | None = None,
        sources: SourceFeed | None = None,
        read_paste: Callable[[str], list[str]] | None = None,
        stop: Callable[[], None] | None = None,
        job_name: str = "",
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__()
        self.poller = poller
        self.interval = interval
        self.run_dir = run_dir
        self.stop_job = stop
        self.job_name = job_name
        self.clock = clock  # names the saved reports; injectable for tests
        self.snapshot: JobSnapshot | None = None
        self.files: RunFiles | None = None
        self.paused = False
        self.polling = False  # a poll is in flight: ticks meanwhile do nothing
        self.polls = 0
        self.poll_seconds = 0.0
        self.last_error = ""
        self.waiting = False  # last_error is an expected wait, not a fault
        self.last_report = ""
        self._saving = threading.Lock()  # reports are written one after another
        # The rank screens' source lines (read off the UI thread) and the run directory's
        # files (logs, events, NCCL): handed in, like the poller.
        self.sources = sources if sources is not None else NoSources()
        self._files_reader = files
        self.read_paste = read_paste  # the Recipes search's reader of a pasted log
        self._running_loop: asyncio.AbstractEventLoop | None = None

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False, icon="▣")
        yield FindingsBanner(id="banner")
        with ViewTabs(id="tabs", initial="overview"):
            with TabPane("Overview", id="overview"):
                yield Input(
                    placeholder="/ filter ranks: 0-3,7 or text (state, frame, host)",
                    id="rank-filter",
                )
                yield RankTable(id="ranks")
                yield StackTree(id="tree")
                yield Static("", id="node-ranks")
            with TabPane("Anomalies", id="anomalies"):
                yield AnomaliesView()
            with TabPane("Memory", id="memory"):
                yield MemoryView()
            with TabPane("NCCL", id="nccl"):
                yield NcclView()
            with TabPane("Logs", id="logs"):
                yield LogsView()
            with TabPane("Recipes", id="recipes"):
                yield RecipesView(read_paste=self.read_paste)
            with TabPane("Timing", id="timing"):
                yield TimingView()  # widgets/timing_view.py
        yield Static(id="status")
        yield Footer()

    def exit_soon(self) -> None:
        """Exit from outside the app's loop, even from a signal handler (thread-safe)."""
        loop = self._running_loop
        if loop is not None:
            loop.call_soon_threadsafe(self.exit)

    def on_mount(self) -> None:
        self._running_loop = asyncio.get_running_loop()
        self.sub_title = one_line(self.job_name)
        self._show_status()
        self.set_interval(self.interval, self.request_poll)
        self.request_poll()
        self.query_one(RankTable).focus()

    # ---- polling: the timer only asks; one worker at a time does the work ----

    def request_poll(self) -> None:
        if self.paused or self.polling:
            return
        self.polling = True
        self._poll()

    @work(thread=True, exclusive=True, exit_on_error=False, group="poll")
    def _poll(self) -> None:
        # The poll itself runs in a daemon thread; this worker only waits for it, or for its
        # own cancellation when the app ends. A thread worker is joined when the app closes,
        # so a poll stuck on a read must never run in one: quitting would wait for it.
        done = threading.Event()
        threading.Thread(
            target=self._poll_once, args=(done,), name="mldebug-poll", daemon=True
        ).start()
        cancelled = get_current_worker().cancelled_event
        while not done.wait(0.05):
            if cancelled.is_set():
                return

    def _poll_once(self, done: threading.Event) -> None:
        started = time.monotonic()
        try:
            snapshot = self.poller.poll()
            files = self._files_reader.read() if self._files_reader is not None else None
        except MldebugError as error:  # e.g. no rank started yet: wait and say so
            message: PollFailed | SnapshotReady = PollFailed(error.message, waiting=True)
        except Exception as error:  # the view must outlive any collector bug
            message = PollFailed(f"{type(error).__name__}: {error}")
        else:
            message = SnapshotReady(snapshot, files, time.monotonic() - started)
        try:
            self.post_message(message)
        except RuntimeError:  # the app has ended and its loop is closed: nobody to tell
            pass
        finally:
            done.set()

    def on_snapshot_ready(self, message: SnapshotReady) -> None:
        self.polling = False
        self.polls += 1
        self.poll_seconds = message.seconds
        self.last_error = ""
        self.snapshot = message.snapshot
        self.files = message.files
        self._show(message.snapshot, message.files)

    def on_poll_failed(self, message: PollFailed) -> None:
        self.polling = False
        self.last_error = message.error
        self.waiting = message.waiting
        self._show_status()

    def _show(self, snapshot: JobSnapshot, files: RunFiles | None) -> None:
        self.query_one(FindingsBanner).show(snapshot.findings)
        self.query_one(RankTable).show(snapshot)
        self.query_one(StackTree).show(snapshot.tree)
        self.query_one(AnomaliesView).show_findings(snapshot.findings)
        self.query_one(AnomaliesView).show_files(files)
        self.query_one(MemoryView).show(snapshot)
        self.query_one(TimingView).show(snapshot)
        self.query_one(NcclView).show_files(files)
        self.query_one(LogsView).show_files(files)
        self._show_status()
        show_on_screen = getattr(self.screen, "show_snapshot", None)
        if callable(show_on_screen):
            show_on_screen(snapshot)

    def _status(self) -> Text:
        return status_text(self)

    def _show_status(self) -> None:
        # One line of a fixed height (app.tcss): its new text needs no layout of the screen,
        # which would measure every widget again at each poll.
        self.query_one("#status", Static).update(self._status(), layout=False)

    # ---- events from widgets ----

    def on_census_asked(self, message: CensusAsked) -> None:
        ask = getattr(self.poller, "request_census", None)  # the agents' census (live/poller)
        self.notify(ask() if ask is not None else "no census: the ranks have no agent")

    def on_show_rank(self, message: ShowRank) -> None:
        self.push_screen(RankScreen(message.rank))

    def on_show_recipe(self, message: ShowRecipe) -> None:
        self.action_open_recipe(message.recipe_id)

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id == "rank-filter":
            self.query_one(RankTable).set_filter(event.value)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "rank-filter":
            self.query_one(RankTable).focus()

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        # Keys go to the tab's main widget, not to one left behind on a hidden tab.
        pane = event.pane
        if pane.id == "overview":
            self.query_one(RankTable).focus()
            return
        for widget in pane.query("*"):
            if widget.focusable and not isinstance(widget, Input):
                widget.focus()
                return

    def on_tree_node_highlighted(self, event: StackTree.NodeHighlighted) -> None:
        node = event.node.data
        label = self.query_one("#node-ranks", Static)
        if node is None or node.frame is None:
            label.update("")
            return
        where = one_line(frame_label(node.frame))  # Text: a frame name is no markup
        label.update(Text(f"ranks at {where}: {format_ranks(node.ranks)}  ({len(node.ranks)})"))

    # ---- actions ----

    def action_toggle_pause(self) -> None:
        self.paused = not self.paused
        self._show_status()
        if not self.paused:
            self.request_poll()

    def action_filter(self) -> None:
        self.query_one(TabbedContent).active = "overview"
        self.query_one("#rank-filter", Input).focus()

    def action_leave_input(self) -> None:
        """Escape from the rank filter returns to the table, keeping the filter."""
        if isinstance(self.focused, Input) and self.focused.id == "rank-filter":
            self.query_one(RankTable).focus()

    def action_tab(self, tab: str) -> None:
        self.query_one(TabbedContent).active = tab

    def action_open_recipe(self, recipe_id: str | None = None) -> None:
        recipe_id = recipe_id or self.query_one(FindingsBanner).top_recipe
        self.query_one(TabbedContent).active = "recipes"
        if recipe_id and not self.query_one(RecipesView).open(recipe_id):
            self.notify(f"No recipe named {recipe_id!r}.", severity="warning", markup=False)

    def action_toggle_help(self) -> None:
        if self.screen.query("HelpPanel"):
            self.action_hide_help_panel()
        else:
            self.action_show_help_panel()

    def pop_screen(self) -> AwaitComplete:
        popped = super().pop_screen()
        if len(self.screen_stack) == 1:  # back at the overview: no rank is looked at
            self.poller.focus(())
        return popped

    def action_save_report(self) -> None:
        if self.snapshot is None:
            self.notify("Nothing to save yet: the first poll has not finished.", severity="warning")
            return
        snapshot, run_dir, cwd, now = self.snapshot, self.run_dir, Path.cwd(), self.clock()
        post, saving = self.post_message, self._saving

        def save() -> None:
            # Rendering every rank's threads takes seconds at 1,024 ranks: not on the UI
            # thread. A daemon thread: quitting does not wait for a slow disk.
            with saving:
                try:
                    post(ReportSaved(*write_report(snapshot, run_dir, cwd, now)))
                except OSError as error:
                    post(ReportSaved(error=str(error)))

        threading.Thread(target=save, name="mldebug-save-report", daemon=True).start()

    def on_report_saved(self, message: ReportSaved) -> None:
        if message.error is not None:
            self.notify(
                one_line(f"Could not write the report: {message.error}"),
                severity="error",
                markup=False,
            )
            return
        self.last_report = str(message.text_path)
        self.notify(
            f"Report written to {one_line(str(message.text_path))}\n"
            f"and {one_line(str(message.json_path))}",
            title="Snapshot saved",
            timeout=8,
            markup=False,
        )
        self._show_status()

    def action_quit_app(self) -> None:
        if self.stop_job is None:
            self.exit(0)
            return

        def chosen(choice: str | None) -> None:
            if choice is None:
                return
            if choice == STOP and self.stop_job is not None:
                self.stop_job()
            self.exit(0)

        self.push_screen(QuitScreen(), chosen)

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield SystemCommand(
            "Pause / resume", "Stop or restart live polling", self.action_toggle_pause
        )
        yield SystemCommand(
            "Save snapshot report",
            "Write the current report (text + JSON)",
            self.action_save_report,
        )
        yield SystemCommand("Filter ranks", "Show only some ranks in the table", self.action_filter)
        yield SystemCommand(
            "Open the suggested recipe", "What to do about the top finding", self.action_open_recipe
        )
        for tab in TABS:
            yield SystemCommand(
                f"Show {tab.title()}",
                f"Switch to the {tab} tab",
                lambda tab=tab: self.action_tab(tab),
            )

    def on_unmount(self) -> None:
        self.workers.cancel_group(self, "poll")
        close = getattr(self.poller, "close", None)
        if callable(close):
            close()
