"""RNNs over padded batches: pack_padded_sequence with lengths on the host and lengths
brought back from the device, LSTM and GRU, pad_packed_sequence. A workload of
tests/gpu/test_workloads_gpu.py."""

import torch
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
lstm = torch.nn.LSTM(8, 16, num_layers=2, batch_first=True).to(device)
gru = torch.nn.GRU(8, 16, bidirectional=True).to(device)
x = torch.randn(4, 12, 8, device=device)
lengths = torch.tensor([12, 9, 5, 3])
lengths_on_device = lengths.to(device)

for _ in range(2):
    packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
    out, (h, c) = lstm(packed)
    padded, out_lengths = pad_packed_sequence(out, batch_first=True)
    packed = pack_padded_sequence(x.transpose(0, 1), lengths_on_device.cpu(), enforce_sorted=False)
    out, h = gru(packed)
    padded, _ = pad_packed_sequence(out, total_length=12)
    (padded.sum() + h.sum()).backward()
