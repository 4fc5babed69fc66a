"""torchmetrics on CUDA: accuracy, F1, a mean, AUROC and a collection, updated and computed over a few
batches, then read with .item(). A workload of tests/gpu/test_workloads_gpu.py."""

import torch
import torchmetrics
from torchmetrics.classification import BinaryAUROC, MulticlassAccuracy, MulticlassF1Score

torch.manual_seed(0)
device = "cuda"
acc = MulticlassAccuracy(num_classes=5).to(device)
f1 = MulticlassF1Score(num_classes=5, average="macro").to(device)
mean = torchmetrics.MeanMetric().to(device)
auroc = BinaryAUROC().to(device)
coll = torchmetrics.MetricCollection({"acc": MulticlassAccuracy(num_classes=5)}).to(device)
for i in range(3):
    logits = torch.randn(8, 5, device=device)
    target = torch.randint(0, 5, (8,), device=device)
    acc.update(logits, target)
    f1.update(logits, target)
    mean.update(torch.rand(8, device=device))
    auroc.update(torch.rand(8, device=device), torch.randint(0, 2, (8,), device=device))
    coll.update(logits, target)
    batch_acc = acc(logits, target)
a = acc.compute()
f = f1.compute()
m = mean.compute()
r = auroc.compute()
c = coll.compute()
vals = [a.item(), f.item(), m.item(), r.item(), c["acc"].item()]
print(vals)
