"""A Triton kernel timed with triton.testing.do_bench (its host waits go through torch)."""
import torch
import triton
import triton.language as tl


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + tl.load(y_ptr + offsets, mask=mask), mask=mask)


n = 1 << 16
x = torch.rand(n, device="cuda")
y = torch.rand(n, device="cuda")
out = torch.empty_like(x)
grid = (triton.cdiv(n, 1024),)
add_kernel[grid](x, y, out, n, BLOCK=1024)
ms = triton.testing.do_bench(lambda: add_kernel[grid](x, y, out, n, BLOCK=1024), warmup=5, rep=20)
assert torch.allclose(out, x + y)
print(f"{ms:.4f} ms" if ms > 0 else "no time")
