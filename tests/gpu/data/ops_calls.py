"""Syncs made through torch.ops: operators called directly, and inductor's fallback kernels
inside torch.compile'd code (its generated wrapper calls them through torch.ops)."""
import torch
import torch._dynamo

torch._dynamo.config.capture_dynamic_output_shape_ops = True
torch._dynamo.config.capture_scalar_outputs = True

x = torch.randn(1000, device="cuda")
torch.ops.aten.nonzero.default(x > 0)
torch.ops.aten._local_scalar_dense.default(x.sum())
torch.ops.aten.nonzero(x > 0)


@torch.compile
def positives(t):
    return t[t > 0].sum() + t.sum().item()


for _ in range(3):
    positives(x)
