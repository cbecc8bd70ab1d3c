"""DDP training of Llama-2-7B on two CPU ranks: impossible as written, a few seconds under

    mldebug run --nproc-per-node 2 --tiny-model examples/tiny_model_ddp.py

where each rank's `from_pretrained` builds the same tiny Llama (DDP makes rank 0's random
weights everyone's) and the tokenizer is a local stand-in.
"""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from transformers import AutoModelForCausalLM, AutoTokenizer

NAME = "meta-llama/Llama-2-7b-hf"


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    tokenizer = AutoTokenizer.from_pretrained(NAME)
    model = DistributedDataParallel(AutoModelForCausalLM.from_pretrained(NAME))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model.train()
    texts = [f"rank {rank} says hello, step {step}" for step in range(3)]
    for step, text in enumerate(texts):
        batch = tokenizer([text], return_tensors="pt")
        loss = model(**batch, labels=batch["input_ids"]).loss
        optimizer.zero_grad()
        loss.backward()  # DDP averages the gradients across ranks here
        optimizer.step()
        print(f"step {step} loss {loss.item():.3f}")
    checksum = torch.tensor([sum(p.double().sum() for p in model.parameters())])
    sums = [torch.zeros_like(checksum) for _ in range(dist.get_world_size())]
    dist.all_gather(sums, checksum)
    print("weights equal across ranks:", all(torch.equal(s, sums[0]) for s in sums))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
