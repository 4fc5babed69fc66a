"""Two ranks on one GPU with gloo and CUDA tensors (tests/gpu/test_distributed_gpu.py)."""
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.ones(4, device="cuda")
for _ in range(3):
    dist.all_reduce(t)  # gloo on CUDA: the caller waits for the copy through the host
    value = t.sum().item()
work = dist.all_reduce(t, async_op=True)
work.wait()  # the wait of an async gloo collective on CUDA tensors
dist.barrier()  # gloo's barrier: ranks only, no device sync
if dist.get_rank() == 0:
    print(t.cpu())  # rank 0 only: divergent
dist.destroy_process_group()
