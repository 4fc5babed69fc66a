"""A Numba CUDA kernel with copies to and from the host (the driver API, no torch)."""
import numpy as np

if not hasattr(np, "row_stack"):  # removed in numpy 2.5; numba-cuda's kernel compiler still names it
    np.row_stack = np.vstack
from numba import cuda  # noqa: E402


@cuda.jit
def scale(values, factor):
    i = cuda.grid(1)
    if i < values.size:
        values[i] *= factor


host = np.arange(4096, dtype=np.float32)
device = cuda.to_device(host)         # host -> device copy
scale[16, 256](device, 2.0)
result = device.copy_to_host()        # device -> host copy
cuda.synchronize()
print(float(result[-1]))
