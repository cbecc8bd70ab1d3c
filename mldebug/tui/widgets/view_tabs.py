"""The live view's tabs: switched only when the user asks for a tab."""

from __future__ import annotations

from textual.widgets import TabbedContent, TabPane


class ViewTabs(TabbedContent):
    """TabbedContent that does not follow the focus into a pane.

    Textual switches to a pane when a widget inside it takes the focus. Here every switch is
    asked for (a number key, a click, an action), and each switch focuses its pane's main
    widget; on a busy machine that focus reaches the pane after the user's next key, and
    following it would pull the user back to the tab they had just left.
    """

    def on_tab_pane_focused(self, event: TabPane.Focused) -> None:
        event.stop()
        event.prevent_default()
