"""Metric helpers as users write them, in a module of their own that names no device: the tensors are the model's
outputs, on the GPU when the model is."""

import torch


def accuracy(logits, labels):
    return (logits.argmax(1) == labels).float().mean().item()


def topk_accuracy(logits, labels, k=5):
    top = logits.topk(k, dim=1).indices
    return (top == labels[:, None]).any(1).float().mean().item()


def evaluate(model, x):
    return model(x).argmax(1).tolist()


def confusion(preds, labels, num_classes):
    matrix = torch.zeros(num_classes, num_classes, dtype=torch.long)
    for p, t in zip(preds.tolist(), labels.tolist()):
        matrix[t, p] += 1
    return matrix


def mean_loss(losses):
    return torch.stack(losses).mean().item()


def f1_score(logits, labels):
    pred = logits.argmax(-1)
    tp = ((pred == 1) & (labels == 1)).sum()
    fp = ((pred == 1) & (labels == 0)).sum()
    fn = ((pred == 0) & (labels == 1)).sum()
    return (2 * tp / (2 * tp + fp + fn)).item()


def has_positive(x):
    if (x > 0).any():
        return True
    return False


def positive_indices(x):
    return x.nonzero()


def masked_mean(x, mask):
    return x[mask].mean()


def classes_seen(labels):
    return torch.unique(labels)


def to_numpy(preds):
    return preds.detach().cpu().numpy()


def log_stats(writer, step, loss, grad_norm):
    writer.add_scalar("loss", loss.item(), step)
    writer.add_scalar("grad_norm", float(grad_norm), step)
