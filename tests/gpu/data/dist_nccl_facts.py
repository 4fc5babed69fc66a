"""One NCCL rank: the catalog's distributed facts (tests/gpu/test_distributed_gpu.py)."""
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("nccl")
local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
t = torch.ones(4, device="cuda")
for _ in range(3):
    dist.all_reduce(t)  # NCCL: no host wait (unless blocking wait)
    value = t.sum().item()  # SF101/SF904: one sync each
work = dist.all_reduce(t, async_op=True)
work.wait()  # NCCL: the stream waits, not the CPU
dist.barrier()  # NCCL barrier: one sync
gathered = [None] * dist.get_world_size()
dist.all_gather_object(gathered, {"loss": 1.0})  # object collective: several syncs inside
objects = [{"step": 1}]
dist.broadcast_object_list(objects, src=0)  # object collective


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.used = nn.Linear(8, 8)
        self.unused = nn.Linear(8, 8)

    def forward(self, x):
        return self.used(x)


net = DistributedDataParallel(Net().cuda(), device_ids=[local_rank], find_unused_parameters=True)
for _ in range(3):
    loss = net(torch.randn(4, 8, device="cuda")).sum()
    loss.backward()  # find_unused_parameters with an unused parameter: a blocking copy in the reducer?
dist.destroy_process_group()
