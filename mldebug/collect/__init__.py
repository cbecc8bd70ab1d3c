"""Collectors: read a rank from outside (py-spy, /proc) and return model objects.

They never change a target and never raise for one rank's trouble: a rank that exited,
is not Python or cannot be read comes back as a StackSample with a FAIL_* failure.
"""
