"""Safe access to a run directory and to /proc: standard library only, loaded by path
inside every rank as well as imported outside (no imports here)."""
