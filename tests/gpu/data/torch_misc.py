"""torch ops and modules that sync or not: attention and an encoder with padding masks, packed LSTMs,
one_hot, nonzero, masked_select, multinomial, repeat_interleave, bincount, histc, allclose, a tensor as a
condition and as a size. A workload of tests/gpu/test_workloads_gpu.py."""

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

torch.manual_seed(0)
device = "cuda"
mha = nn.MultiheadAttention(16, 2, batch_first=True).to(device).eval()
enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 2, 32, batch_first=True), 2, enable_nested_tensor=True).to(device).eval()
lstm = nn.LSTM(16, 8, batch_first=True).to(device)
emb = nn.Embedding(32, 16, padding_idx=0).to(device)
for step in range(2):
    x = torch.randn(3, 6, 16, device=device)
    pad = torch.zeros(3, 6, dtype=torch.bool, device=device)
    pad[0, 4:] = True
    with torch.no_grad():
        a, w = mha(x, x, x, key_padding_mask=pad)
        e = enc(x, src_key_padding_mask=pad)
    lengths = (~pad).sum(1)
    packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
    o, _ = lstm(packed)
    o, _ = pad_packed_sequence(o, batch_first=True)
    ids = torch.randint(0, 32, (3, 6), device=device)
    h = emb(ids)
    oh = F.one_hot(ids)
    nz = torch.nonzero(ids > 10)
    ms = torch.masked_select(x, x > 0)
    tk = torch.topk(x.sum(-1), 2).indices
    mult = torch.multinomial(torch.softmax(x[:, 0], -1), 2)
    rep = torch.repeat_interleave(torch.arange(3, device=device), lengths)
    loss = F.cross_entropy(x.reshape(-1, 16), ids.reshape(-1) % 16, ignore_index=0)
    loss.backward() if loss.requires_grad else None
    srt, idx = torch.sort(ids.flatten())
    bc = torch.bincount(ids.flatten())
    hist = torch.histc(x, bins=4)
    allclose = torch.allclose(x, x + 1e-9)
    isfin = torch.isfinite(x).all()
    if isfin:
        cnt = int(lengths.max())
    where1 = torch.where(ids > 5)
    wherez = torch.where(ids > 5, ids, 0)
    ci = torch.clamp(x, min=torch.tensor(0.0, device=device))
    np_arr = x.detach().cpu().numpy()
print(cnt, np_arr.shape)
