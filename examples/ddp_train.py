"""A tiny DistributedDataParallel training loop: syncfree's distributed example.

    syncfree run --nproc-per-node 2 examples/ddp_train.py
    torchrun --nproc-per-node 2 -m syncfree run examples/ddp_train.py

Written for GPUs: NCCL, one device per rank. On a machine without CUDA it runs as it is
under syncfree, whose predict mode puts it on CPU stand-ins and gloo; without syncfree it
falls back to gloo on the CPU. Each step reads the all-reduced loss on the host (a sync on
every rank); every few steps rank 0 alone prints the gradient norm (a sync on rank 0 only).
"""

import argparse
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--log-every", type=int, default=5)
    args = parser.parse_args()

    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if cuda:
        torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)).to(device)
    model = DistributedDataParallel(model, device_ids=[local_rank] if cuda else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    data = torch.Generator().manual_seed(rank)

    for step in range(args.steps):
        x = torch.randn(16, 32, generator=data).pin_memory() if cuda else torch.randn(16, 32, generator=data)
        y = x.sum(dim=1, keepdim=True) / 8
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

        reduced = loss.detach().clone()
        dist.all_reduce(reduced)
        mean_loss = reduced.item() / world_size  # every rank, every step
        if rank == 0 and step % args.log_every == 0:
            print(f"step {step}: loss {mean_loss:.4f}, grad norm {grad_norm:.3f}")  # rank 0 only

    dist.destroy_process_group()


if __name__ == "__main__":
    main()
