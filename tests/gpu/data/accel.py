"""accelerate with fp16: prepare, autocast, backward, clip_grad_norm_, gather_for_metrics, gather and
print of a loss. A workload of tests/gpu/test_workloads_gpu.py."""

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
accelerator = Accelerator(mixed_precision="fp16")
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
dl = DataLoader(TensorDataset(torch.randn(48, 16), torch.randint(0, 4, (48,))), batch_size=16)
model, opt, dl = accelerator.prepare(model, opt, dl)
for x, y in dl:
    with accelerator.autocast():
        loss = torch.nn.functional.cross_entropy(model(x), y)
    accelerator.backward(loss)
    accelerator.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad()
    preds = accelerator.gather_for_metrics(model(x).argmax(-1))
    correct = (preds == y).sum()
    loss_g = accelerator.gather(loss.detach()).mean()
    accelerator.print(loss_g.item())
total = correct.item()
