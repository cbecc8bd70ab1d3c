"""torch.profiler traces (Chrome trace JSON, plain or gzipped) of one or many ranks.

`stream` reads a trace in bounded memory (event by event, never the whole document),
`read` folds one rank's events into a `model.RankTrace` (time unions, its collectives, its
host-side waits), `match` lines the ranks' collectives up, and `findings` says what they
show as `Finding`s for explain's judge. Standard library only; nothing here prints.
"""
