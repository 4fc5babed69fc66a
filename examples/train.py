"""A small training script with the syncs most training loops have.

    syncfree run examples/train.py --steps 20      # where it would stall a GPU, and how often
    python examples/train.py --steps 20            # the same script, plain

Without a CUDA device syncfree runs it on CPU stand-ins (predict mode); plain Python runs it on the CPU.
"""

import argparse

import torch
from torch import nn


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--log-every", type=int, default=1)
    return parser.parse_args(argv)


def make_model(device):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)).to(device)


def train(steps, log_every, device):
    model = make_model(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(256, 32, device=device)
    y = torch.randn(256, 1, device=device)
    history = []
    for step in range(steps):
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if torch.isnan(loss):                      # a Python condition on a GPU tensor: syncs every step
            raise FloatingPointError("loss is NaN")
        if step % log_every == 0:
            history.append(loss.item())            # .item(): syncs every logged step
    return history


def main(argv=None):
    args = parse_args(argv)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    history = train(args.steps, args.log_every, device)
    print(f"{len(history)} logged losses, last {history[-1]:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
