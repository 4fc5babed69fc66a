"""A custom CUDA extension (built with nvcc by load_inline) that calls cudaDeviceSynchronize."""
import torch
from torch.utils.cpp_extension import load_inline

CUDA = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void fill(float* out, int n, float value) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = value;
}

float fill_and_wait(torch::Tensor out, double value) {
  int n = out.numel();
  fill<<<(n + 255) / 256, 256>>>(out.data_ptr<float>(), n, (float)value);
  cudaDeviceSynchronize();
  float first = 0;
  cudaMemcpy(&first, out.data_ptr<float>(), sizeof(float), cudaMemcpyDeviceToHost);
  return first;
}
"""
CPP = "float fill_and_wait(torch::Tensor out, double value);"

extension = load_inline("syncfree_cupti_extension", cpp_sources=CPP, cuda_sources=CUDA,
                        functions=["fill_and_wait"], verbose=False)
out = torch.empty(1 << 16, device="cuda")
torch.cuda.synchronize()
first = extension.fill_and_wait(out, 3.0)   # two blocking calls inside the extension
print(first, extension.fill_and_wait(out, 4.0))
