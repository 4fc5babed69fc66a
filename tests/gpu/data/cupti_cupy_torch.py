"""CuPy and torch sharing memory: syncs that torch's debug mode does not see (issue 24)."""
import cupy as cp
import torch

x = torch.randn(4096, device="cuda")
a = cp.from_dlpack(x)                 # a view, no copy
total = float(a.sum())                # CuPy reads a device scalar
host = cp.asnumpy(a * 2)              # device -> host copy
cp.cuda.Device().synchronize()        # CuPy's device synchronize
b = cp.asarray(host)                  # host -> device copy from pageable memory
cp.cuda.get_current_stream().synchronize()
y = torch.from_dlpack(b)
print(round(y.sum().item(), 3), round(total, 3))  # a torch sync
for _ in range(3):
    peak = float(a.max())             # three more CuPy syncs on one line
