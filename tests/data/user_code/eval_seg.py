"""An evaluation script for segmentation: metrics on the model's masks; the model is moved by the caller."""

import numpy as np
import torch


def dice(pred, target, eps=1e-6):
    inter = (pred * target).sum()
    return ((2 * inter + eps) / (pred.sum() + target.sum() + eps)).item()


def iou_per_class(pred, target, num_classes):
    scores = []
    for c in range(num_classes):
        p, t = pred == c, target == c
        union = (p | t).sum()
        if union == 0:
            continue
        scores.append(((p & t).sum() / union).item())
    return np.mean(scores)


def evaluate_loader(model, loader):
    results = []
    with torch.no_grad():
        for images, masks in loader:
            out = model(images)
            pred = out.argmax(1)
            results.append(dice(pred.float(), masks.float()))
    return float(np.mean(results))


def foreground_boxes(mask):
    ys, xs = torch.where(mask > 0)
    if len(ys) == 0:
        return None
    return xs.min().item(), ys.min().item(), xs.max().item(), ys.max().item()
