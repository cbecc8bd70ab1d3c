"""The text report of `mldebug dump`: verdict first, then the merged tree, then detail.

Rendered with rich, which leaves colour out when NO_COLOR is set or the output is not a
terminal. `render_text` returns plain text (for tests, files, the live view);
`print_report` writes to a Console.
"""

from __future__ import annotations

import io
from bisect import bisect_left
from collections.abc import Callable, Iterable, Sequence
from operator import attrgetter

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from mldebug.model import (
    SEVERITY_ERROR,
    SEVERITY_INFO,
    STATE_EXITED,
    STATE_RUNNING,
    STATE_STUCK,
    STATE_WAITING,
    Finding,
    GroupProgress,
    JobSnapshot,
    RankView,
    StackNode,
)
from mldebug.ranges import format_ranks
from mldebug.rankrules import frame_label, is_torch_collective, is_user_frame
from mldebug.report.timing import timing_part
from mldebug.textsafe import one_line, printable
from mldebug.wording import finding_text

_RANK = attrgetter("rank")
SEVERITY_STYLE = {SEVERITY_ERROR: "bold red", "warning": "yellow", SEVERITY_INFO: "green"}
STATE_STYLE = {
    STATE_STUCK: "red",
    STATE_RUNNING: "green",
    STATE_WAITING: "red",
    "exited": "magenta",
    "missing": "magenta",
    "unreadable": "yellow",
}


def plain(text: str, style: str = "", *, lines: bool = False) -> Text:
    """Text from a rank, a file or the environment, as a rich Text: never parsed as markup
    (a `[/data/shard1]` stays as it is), and without control sequences. With `lines`, its
    newlines and tabs stay; otherwise it is put on one line."""
    return Text(printable(text) if lines else one_line(text), style=style)


def _header(snapshot: JobSnapshot) -> Text:
    present = len([v for v in snapshot.ranks if v.target is not None])
    world = snapshot.world_size
    text = Text("mldebug dump: ", style="bold")
    text.append(f"{present} rank{'s' if present != 1 else ''} found")
    if world:
        text.append(f" of world size {world}")
    if snapshot.run_dir:
        text.append(f"  run {one_line(snapshot.run_dir)}", style="dim")
    elif snapshot.job:
        text.append(f"  job {one_line(snapshot.job)}", style="dim")
    return text


def _verdict(findings: Sequence[Finding]) -> RenderableType:
    if not findings:
        return Text("Verdict: nothing to report (no ranks could be judged)", style="bold")
    first = findings[0]
    text = Text("Verdict: ", style="bold")
    text.append(printable(finding_text(first)), style=SEVERITY_STYLE.get(first.severity, ""))
    if first.detail:
        text.append(f"\n  {printable(first.detail)}")
    if len(first.sources) > 1:  # several sources said it; the judge made it one finding
        text.append(f"\n  seen by: {', '.join(first.sources)}", style="dim")
    if first.recipe:
        # Nothing is wrong with a working job: its recipe is for when it is too slow.
        lead = "if it is too slow" if first.severity == SEVERITY_INFO else "what to do"
        text.append(f"\n  {lead}: mldebug recipes {one_line(first.recipe)}", style="cyan")
    return text


class _RangeTexts:
    """Each rank set a report names written once per tuple object: in a large job the
    findings, the groups table and the tree's frames along a stack name the same tuple of
    (up to) every rank, and sorting it again for each cost more than the rest of the
    report (benchmarks/bench_commands.py --only front)."""

    def __init__(self) -> None:
        # Keyed by id; the tuple is held, so that its id cannot pass to another meanwhile.
        self._made: dict[int, tuple[tuple[int, ...], str]] = {}

    def __call__(self, ranks: tuple[int, ...]) -> str:
        made = self._made.get(id(ranks))
        if made is None or made[0] is not ranks:
            made = self._made[id(ranks)] = (ranks, format_ranks(ranks))
        return made[1]


def _findings(findings: Sequence[Finding], texts: _RangeTexts) -> RenderableType | None:
    if len(findings) < 2:
        return None
    table = Table(
        title="Findings",
        title_justify="left",
        show_edge=False,
        box=None,
        pad_edge=False,
        expand=False,
    )
    for name in ("severity", "kind", "ranks", "summary"):
        table.add_column(name, overflow="fold")
    for finding in findings:
        summary = finding_text(finding) + (f"  [recipe {finding.recipe}]" if finding.recipe else "")
        table.add_row(
            plain(finding.severity, SEVERITY_STYLE.get(finding.severity, "")),
            plain(finding.kind),
            Text(texts(finding.ranks)),
            plain(summary, lines=True),
        )
    return table


def age_text(seconds: float) -> str:
    return f"{seconds:.1f}s" if seconds < 10 else f"{seconds:.0f}s"


def span_text(values: Sequence[float | int], render: Callable[[float], str] = str) -> str:
    """'12', or '11-12' for ranks that differ; '-' when none is known."""
    if not values:
        return "-"
    low, high = render(min(values)), render(max(values))
    return low if low == high else f"{low}-{high}"


def _agent_cells(views: Sequence[RankView]) -> list[Text]:
    """The step and heartbeat age of some ranks, as their agents report them."""
    steps = [v.step for v in views if v.step is not None]
    ages = [v.heartbeat_age for v in views if v.heartbeat_age is not None]
    return [Text(span_text(steps)), Text(span_text(ages, age_text))]


def _views_of(views: Sequence[RankView], ranks: Sequence[int]) -> list[RankView] | None:
    """The views of a few `ranks`, found by halving in `views`; None when one is not where
    rank order puts it (views not in rank order, or a rank without a view)."""
    found = []
    for rank in ranks:
        at = bisect_left(views, rank, key=_RANK)
        if at == len(views) or views[at].rank != rank:
            return None
        found.append(views[at])
    return found


def _groups(snapshot: JobSnapshot, texts: _RangeTexts) -> RenderableType:
    table = Table(
        title="Ranks by stack", title_justify="left", show_edge=False, box=None, pad_edge=False
    )
    # A rank's step and heartbeat come from its in-rank agent: columns only when one reports.
    # One pass finds that and the ranks in no group (no stack, or exited).
    agents = False
    others: dict[tuple[str, str], list[RankView]] = {}
    ranks = snapshot.ranks
    for view in ranks:
        agents = agents or view.agent is not None
        if not view.threads or view.state == STATE_EXITED:
            others.setdefault((view.state, view.detail), []).append(view)
    names = ["ranks", "state", "collective"] + (["step", "heartbeat"] if agents else [])
    for name in (*names, "innermost user frame"):
        table.add_column(name, overflow="fold")
    by_rank: dict[int, RankView] = {}
    for group in snapshot.groups:
        collective = group.collective
        views: list[RankView] = []
        if agents or not collective:  # a group's ranks one by one only where they are shown
            # A few ranks (the odd ones out of a large job) are looked up; many, mapped once.
            few = None if by_rank or len(group.ranks) > 64 else _views_of(ranks, group.ranks)
            if few is None:
                by_rank = by_rank or {v.rank: v for v in ranks}
                few = [by_rank[r] for r in group.ranks if r in by_rank]
            views = few
        if not collective:
            # Ranks their agents say wait in a collective that their stacks do not show (NCCL).
            said = {v.collective for v in views}
            collective = said.pop() if len(said) == 1 else None
        table.add_row(
            Text(texts(group.ranks)),
            plain(group.state, STATE_STYLE.get(group.state, "")),
            plain(collective or "-"),
            *(_agent_cells(views) if agents else []),
            plain(frame_label(group.user_frame)),
        )
    for (state, detail), views in others.items():
        table.add_row(
            Text(format_ranks([v.rank for v in views])),
            plain(state, STATE_STYLE.get(state, "")),
            Text("-"),
            *(_agent_cells(views) if agents else []),
            plain(detail, lines=True),
        )
    return table


def _node_label(node: StackNode, hidden: int, texts: _RangeTexts) -> Text:
    text = Text()
    text.append(library_note(hidden), style="dim")
    style = "bold" if node.frame and is_user_frame(node.frame) else ""
    text.append(one_line(frame_label(node.frame)), style=style)
    text.append(f"  [{texts(node.ranks)}]", style="cyan")
    return text


def folded(node: StackNode) -> tuple[StackNode, int]:
    """`node`, or the first node below it past a run of library frames (the standard
    library, packages, torch, mldebug's own wrappers) that every rank of the branch
    shares, and how many were folded. The run stops at torch's collective call itself:
    where the ranks wait stays on screen. The text report and the live view both fold."""
    hidden = 0
    while (
        len(node.children) == 1
        and node.frame is not None
        and not is_user_frame(node.frame)
        and not is_torch_collective(node.frame)
        and _same(node.children[0].ranks, node.ranks)
    ):
        hidden += 1
        node = node.children[0]
    return node, hidden


def _same(ranks: tuple[int, ...], other: tuple[int, ...]) -> bool:
    # A node and its only child through the same groups share one tuple (analysis.merge):
    # tuples compare item by item, even one with itself.
    return ranks is other or ranks == other


def library_note(hidden: int) -> str:
    return f"({hidden} library frame{'s' if hidden > 1 else ''}) " if hidden else ""


def _add_children(branch: Tree, node: StackNode, compact: bool, texts: _RangeTexts) -> None:
    for child in node.children:
        child, hidden = folded(child) if compact else (child, 0)
        _add_children(branch.add(_node_label(child, hidden, texts)), child, compact, texts)


def _tree(snapshot: JobSnapshot, compact: bool, texts: _RangeTexts) -> RenderableType | None:
    if not snapshot.tree.children:
        return None
    tree = Tree(
        Text("Merged stacks (main thread, outermost first; [ranks] on each frame)", style="bold")
    )
    _add_children(tree, snapshot.tree, compact, texts)
    return tree


def group_progress_text(progress: GroupProgress) -> str:
    """One process group as a rank's agent counts it: the last call made, the last complete.
    On one line and printable (the names and sites come from the rank)."""
    made, done = progress.enqueued, progress.completed
    text = f"{progress.group}: "
    if made is None:
        text += "no call made"
    else:
        text += f"made {made.op} #{made.seq}" + (f" ({made.site})" if made.site else "")
    text += f", complete up to #{done.seq}" if done is not None else ", none complete"
    return one_line(text)


def _rank_detail(view: RankView) -> RenderableType:
    target = view.target
    head = Text(f"rank {view.rank}", style="bold")
    if target is not None:
        head.append(f"  pid {target.pid}" + (f" on {one_line(target.host)}" if target.host else ""))
    head.append(f"  {view.state}", style=STATE_STYLE.get(view.state, ""))
    for value, say in (
        (view.cpu_percent, lambda cpu: f"cpu {cpu:.0f}%"),
        (view.rss_bytes, lambda rss: f"rss {rss / 2**20:.0f} MiB"),
        (view.exit_code, lambda code: f"exit code {code}"),
        (view.dataloader_worker, lambda worker: f"waits for DataLoader worker {worker}"),
        (view.step, lambda step: f"step {step}"),
        (view.heartbeat_age, lambda age: f"heartbeat {age_text(age)} ago"),
    ):
        if value is not None:  # what is known of the rank, in this order
            head.append(f"  {say(value)}")
    lines = [head]
    if view.agent is not None:
        lines += [Text(f"  {group_progress_text(g)}") for g in view.agent.groups[:8]]
    if view.detail and not view.threads:
        lines.append(Text(f"  {printable(view.detail)}", style="dim"))
    for thread in view.threads:
        flags = "active" if thread.active else "idle"
        flags += "+gil" if thread.owns_gil else ""
        name = one_line(thread.name)
        lines.append(
            Text(f'  Thread {thread.os_thread_id or thread.thread_id} ({flags}): "{name}"')
        )
        for frame in reversed(thread.frames):  # innermost first, as py-spy prints them
            style = "bold" if is_user_frame(frame) else "dim" if frame.native else ""
            lines.append(Text(f"      {one_line(frame_label(frame))}", style=style))
    return Group(*lines)


def report_parts(
    snapshot: JobSnapshot, verbose: bool = False, ranks: Iterable[int] | None = None
) -> list[RenderableType]:
    """The report as rich renderables, in reading order."""
    parts: list[RenderableType] = [_header(snapshot), _verdict(snapshot.findings)]
    texts = _RangeTexts()
    for optional in (
        _findings(snapshot.findings, texts),
        _groups(snapshot, texts),
        timing_part(snapshot.timing),  # report/timing.py
        _tree(snapshot, not verbose, texts),
    ):
        if optional is not None:
            parts.append(optional)
    wanted = set(ranks) if ranks is not None else None
    if verbose or wanted:
        for view in snapshot.ranks:
            if wanted is None or view.rank in wanted:
                parts.append(_rank_detail(view))
    return parts


def print_report(
    snapshot: JobSnapshot,
    console: Console,
    verbose: bool = False,
    ranks: Iterable[int] | None = None,
) -> None:
    for index, part in enumerate(report_parts(snapshot, verbose, ranks)):
        if index > 1:
            console.print()
        console.print(part)


def render_text(
    snapshot: JobSnapshot,
    verbose: bool = False,
    ranks: Iterable[int] | None = None,
    width: int = 120,
    color: bool = False,
) -> str:
    """The report as a string (ANSI colours only when `color`)."""
    buffer = io.StringIO()
    console = Console(
        file=buffer,
        width=width,
        force_terminal=color,
        no_color=not color,
        highlight=False,
        soft_wrap=False,
    )
    print_report(snapshot, console, verbose, ranks)
    return buffer.getvalue()
