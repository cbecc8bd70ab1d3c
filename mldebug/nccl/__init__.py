"""Reading what NCCL, torch.distributed and Flight Recorder leave behind, and comparing ranks.

`logparse` streams NCCL debug output and torch/gloo error text into per-rank facts,
`compare` turns those facts into cross-rank findings, `flight` reads Flight Recorder dumps,
and `scan` walks files and directories for all of them.
"""
