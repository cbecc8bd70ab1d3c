"""`mldebug attach`: the live terminal UI over a running job (Textual).

The app draws `JobSnapshot`s that a poller object produces in a background thread; it never
collects anything itself, so tests hand it a fake poller.
"""
