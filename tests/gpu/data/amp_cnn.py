"""A CNN step under autocast with GradScaler (unscale_, clip_grad_norm_, step, update), OneCycleLR,
BatchNorm and a label-smoothed loss; the scale read at the end. A workload of tests/gpu/test_workloads_gpu.py."""

import torch
import torch.nn as nn

torch.manual_seed(0)
device = "cuda"
model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                      nn.Flatten(), nn.Linear(8, 10)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
scaler = torch.amp.GradScaler("cuda")
sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=10)
crit = nn.CrossEntropyLoss(label_smoothing=0.1)
for step in range(3):
    x = torch.randn(4, 3, 16, 16, device=device)
    y = torch.randint(0, 10, (4,), device=device)
    with torch.autocast("cuda", dtype=torch.float16):
        out = model(x)
        loss = crit(out, y)
    scaler.scale(loss).backward()
    scaler.unscale_(opt)
    nn.utils.clip_grad_norm_(model.parameters(), 1.0, error_if_nonfinite=False)
    scaler.step(opt)
    scaler.update()
    opt.zero_grad(set_to_none=True)
    sched.step()
    running = loss.detach()
    correct = (out.argmax(1) == y).sum().item()
scale = scaler.get_scale()
print(correct, scale, running.cpu())
