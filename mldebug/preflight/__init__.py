"""The program `mldebug check` runs in every rank (torch only there): preflight/rank.py."""
