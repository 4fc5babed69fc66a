"""A project's utils.py: helpers taking the model's tensors (no device word in this module)."""

import numpy as np
import torch


def perplexity(loss):
    return float(torch.exp(loss))


def ids_to_text(tokenizer, ids):
    return tokenizer.decode(ids.tolist())


def save_predictions(path, logits):
    preds = logits.argmax(-1).cpu().numpy()
    np.save(path, preds)
    return preds


def count_correct(pred, target):
    return int((pred == target).sum())


def check_finite(loss):
    if not torch.isfinite(loss).all():
        raise ValueError("non-finite loss")


def select_valid(x, lengths):
    keep = lengths > 0
    return x[keep]


def best_class(probs):
    return probs.max(dim=-1).indices[0].item()


def print_batch_stats(batch):
    print("mean", batch.mean().item(), "max", batch.max().item())
