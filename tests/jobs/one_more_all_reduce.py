"""The book's collective mismatch on gloo: rank 0 makes one all_reduce more than rank 1, which
goes on to the barrier. Both time out after 5 s; rank 1's timer usually fires first.

Run by `mldebug run --nproc-per-node 2`. When the real in-rank agent writes no state.json,
a stand-in writes it per docs/agent.md (tests/jobs/contract_agent.py); the job says which
on its first line ("agent: real" or "agent: contract").
"""

from datetime import timedelta

import torch
import torch.distributed as dist
from contract_agent import ContractAgent

dist.init_process_group("gloo", timeout=timedelta(seconds=5))
rank = dist.get_rank()
agent = ContractAgent.unless_real(rank, size=2)
print(f"agent: {'contract' if agent else 'real'}", flush=True)
tensor = torch.ones(4)
for _ in range(4 if rank == 0 else 3):
    if agent:
        agent.before("all_reduce")
    dist.all_reduce(tensor)  # ALL_REDUCE
    if agent:
        agent.after()
if agent:
    agent.before("barrier")
dist.barrier()  # BARRIER
print("never reached", flush=True)
