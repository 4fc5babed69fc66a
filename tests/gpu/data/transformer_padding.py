"""nn.TransformerEncoder and nn.MultiheadAttention with padding masks, in evaluation (their
fast paths: nested tensors on a GPU) and in training. A workload of
tests/gpu/test_workloads_gpu.py."""

import torch

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
layer = torch.nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, batch_first=True)
encoder = torch.nn.TransformerEncoder(layer, num_layers=3).to(device)
attention = torch.nn.MultiheadAttention(32, 4, batch_first=True).to(device)

x = torch.randn(4, 10, 32, device=device)
lengths = torch.tensor([10, 7, 5, 2], device=device)
padding = torch.arange(10, device=device)[None, :] >= lengths[:, None]

encoder.eval()
attention.eval()
with torch.no_grad():
    for _ in range(2):
        y = encoder(x, src_key_padding_mask=padding)
        out, _ = attention(x, x, x, key_padding_mask=padding, need_weights=False)

encoder.train()
y = encoder(x, src_key_padding_mask=padding)
y.sum().backward()
