"""The collective ledger: its contract (rules.py, loaded by path inside every rank),
the one comparer (compare.py), its forms, words, arrival order, and the table from a
verdict to a finding (verdicts.py). Nothing is imported here: the ranks load rules.py
through this package without the rest."""
