"""The merged stack tree: every rank's main-thread stack as one prefix tree.

Each node says which ranks pass through it ("0-2,4-255 (255)"), so one rank that went
elsewhere stands out as a small branch. The tree is rebuilt only when its shape or rank sets
changed, and the expanded nodes stay expanded across rebuilds.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

from rich.text import Text
from textual.widgets import Tree
from textual.widgets.tree import TreeNode

from mldebug.model import Frame, StackNode
from mldebug.ranges import format_ranks
from mldebug.rankrules import is_user_frame
from mldebug.report.text import folded, library_note
from mldebug.textsafe import one_line


def node_key(frame: Frame | None) -> str:
    return f"{frame.function}@{frame.file}:{frame.line}" if frame else "<root>"


def node_label(node: StackNode, total: int, hidden: int = 0) -> Text:
    """A node's line; `hidden`: library frames folded above it (report.text.folded)."""
    frame = node.frame
    label = Text()
    if frame is None:
        label.append(f"all ranks ({len(node.ranks)})", style="bold")
        return label
    label.append(library_note(hidden), style="dim")
    style = "bold" if is_user_frame(frame) else "dim" if frame.native else ""
    label.append(one_line(frame.function), style=style)
    where = os.path.basename(one_line(frame.file))  # an escape sequence may hold a "/"
    label.append(f"  {where}:{frame.line}" if frame.line is not None else f"  {where}", "cyan")
    ranks_style = "bold yellow" if len(node.ranks) < total else "dim"
    label.append(f"  [{format_ranks(node.ranks)}]", style=ranks_style)
    if len(node.ranks) > 1:
        label.append(f" ({len(node.ranks)})", style="dim")
    return label


class StackTree(Tree[StackNode]):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(Text("waiting for the first poll..."), **kwargs)
        self.show_root = True
        self._shown: StackNode | None = None
        self._collapsed: set[tuple[str, ...]] = set()  # closed by the user: stays closed
        self._paths: dict[int, tuple[str, ...]] = {}  # tree node id -> frame path
        self._user_path: tuple[str, ...] | None = None  # where the user put the cursor
        self.rebuilds = 0

    def show(self, tree: StackNode) -> None:
        if tree == self._shown:
            return
        self._remember_expansion()
        self._shown = tree
        self.rebuilds += 1
        self.clear()
        self._paths = {self.root.id: ("<root>",)}
        total = len(tree.ranks)
        self.root.set_label(node_label(tree, total))
        self.root.data = tree
        self._add_branch(self.root, tree, total, ("<root>",))
        self.root.expand()
        # Lines are laid out on the next refresh; place the cursor then.
        self.call_after_refresh(self._place_cursor)

    def _add_branch(
        self, parent: TreeNode, node: StackNode, total: int, path: tuple[str, ...]
    ) -> None:
        for child in node.children:
            # Library frames every rank of the branch shares fold into the next one, as in
            # the text report: mldebug's collective wrapper is no frame of the user's.
            child, hidden = folded(child)
            child_path = (*path, node_key(child.frame))
            item = parent.add(
                node_label(child, total, hidden), data=child, allow_expand=bool(child.children)
            )
            self._paths[item.id] = child_path
            if child.children:
                self._add_branch(item, child, total, child_path)
                # Everything starts open (the split is what matters); what the user
                # closed stays closed.
                if child_path not in self._collapsed:
                    item.expand()

    def _place_cursor(self) -> None:
        """Back where the user left it; else on the odd ranks' current frame, so the
        branch that matters is on screen even in a short terminal."""
        nodes = [self.root, *self._walk(self.root)]
        if self._user_path is not None:
            for item in nodes:
                if self._paths.get(item.id) == self._user_path:
                    self.move_cursor(item)
                    return
        leaves = [item for item in nodes if item.data is not None and not item.children]
        if leaves:
            # the leaves have data (filtered above); mypy does not carry that into the lambda
            self.move_cursor(min(leaves, key=lambda item: len(item.data.ranks)))  # type: ignore[union-attr]

    def on_resize(self) -> None:
        # The banner above grows when the verdict arrives, and the tree gets shorter: keep
        # the cursor's line in view, where _place_cursor put it for the taller tree.
        if self.cursor_node is not None:
            self.call_after_refresh(self._show_cursor)

    def _show_cursor(self) -> None:
        if self.cursor_node is not None:
            self.scroll_to_node(self.cursor_node, animate=False)

    def _walk(self, item: TreeNode) -> Iterator[TreeNode]:
        for child in item.children:
            yield child
            yield from self._walk(child)

    def on_tree_node_highlighted(self, event: Tree.NodeHighlighted) -> None:
        if self.has_focus:  # a move by the user, not by _place_cursor
            self._user_path = self._paths.get(event.node.id)

    def _remember_expansion(self) -> None:
        for item in self._walk(self.root):
            path = self._paths.get(item.id)
            if path is None or not item.allow_expand:
                continue
            if item.is_expanded:
                self._collapsed.discard(path)
            else:
                self._collapsed.add(path)
