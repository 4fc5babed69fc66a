"""Metric-state classes, a logging callback and a dataset as users write them, beside NumPy (no device word here):
the meters and the callback take the model's outputs, on the GPU when the model is."""

import numpy as np
import torch


class AverageMeter:
    def __init__(self):
        self.sum = 0.0
        self.count = 0

    def update(self, loss, n=1):
        self.sum += loss.item() * n
        self.count += n

    @property
    def avg(self):
        return self.sum / max(1, self.count)


class RunningAccuracyMetric:
    def __init__(self):
        self.correct = 0
        self.total = 0
        self.history = []

    def update(self, logits, labels):
        self.correct += (logits.argmax(1) == labels).sum().item()
        self.total += labels.numel()

    def compute(self):
        value = self.correct / max(1, self.total)
        self.history.append(value)
        return float(np.mean(self.history))


class LoggingCallback:
    def __init__(self, every=50):
        self.every = every
        self.losses = []

    def on_batch_end(self, step, loss, logits):
        self.losses.append(loss.item())
        if step % self.every == 0:
            confident = (logits.softmax(-1).max(-1).values > 0.9).float().mean().item()
            print(step, np.mean(self.losses[-self.every:]), confident)


class EmbeddingDataset(torch.utils.data.Dataset):
    def __init__(self, features, labels):
        self.features = np.asarray(features, dtype=np.float32)
        self.labels = np.asarray(labels)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return torch.from_numpy(self.features[i]), int(self.labels[i])


def embed_all(encoder, loader):
    out = []
    with torch.no_grad():
        for x, _ in loader:
            out.append(encoder(x).cpu().numpy())
    return np.concatenate(out)
