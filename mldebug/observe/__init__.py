"""The orchestrators: one look at a job is collect, then analyse. `pyspy.py` reads the
ranks' Python stacks (and their agents' files); `gdb.py` reads native threads of live
ranks or core files. The views and the launcher look at a job through here; collectors
and the analysis never import it.
"""
