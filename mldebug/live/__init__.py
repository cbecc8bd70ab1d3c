"""Live collection: what the live view polls (targets followed, stacks, the run's files).

No drawing here: the Textual app (mldebug.tui) is handed a poller and the run files' reader,
and shows what they return.
"""
