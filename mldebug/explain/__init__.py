"""`mldebug explain`: what a pasted log, a file or a run directory says, ranked by how sure.

Every reader mldebug has runs over the text (NCCL/torch/gloo lines through `mldebug.nccl`,
tracebacks, torchelastic summaries, OOM messages, py-spy dumps, nvidia-smi tables,
p2pBandwidthLatencyTest matrices, Flight Recorder dumps); each finding cites the lines it
rests on and says what a fragment cannot tell.
"""
