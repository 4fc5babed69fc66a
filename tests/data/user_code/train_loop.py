"""A training script as users write it: a device chosen at the top, tensors moved there."""

import torch
import torch.nn.functional as F

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def train_step(model, optimizer, x, y):
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.item()


def train_epoch(model, loader, optimizer, log_every=100):
    model.train()
    total = 0.0
    for step, (x, y) in enumerate(loader):
        x, y = x.to(device), y.to(device)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        total += loss.item()
        if step % log_every == 0:
            print(f"step {step} loss {loss.item():.4f}")
    return total / len(loader)


@torch.no_grad()
def evaluate(model, loader):
    model.eval()
    correct = seen = 0
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        pred = model(x).argmax(1)
        correct += (pred == y).sum().item()
        seen += y.numel()
    return correct / seen


def predict(model, x):
    return model(x).argmax(1).cpu().numpy()


def early_stop(loss, best, patience, bad):
    if loss < best:
        return loss, 0
    return best, bad + 1


def clip_and_check(model, loss):
    if torch.isnan(loss):
        raise RuntimeError("loss is NaN")
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    return float(norm)
