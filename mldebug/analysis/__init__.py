"""Analysis: pure functions from stack samples to a merged tree, groups and findings."""
