"""A GPT-style training script (nanoGPT's shape): causal self-attention masked with
masked_fill(-inf), AdamW, a logged loss per step, a torch.save checkpoint every few steps,
an evaluation loop, then the checkpoint loaded back without map_location.

A workload of tests/gpu/test_workloads_gpu.py: run on a GPU (warn mode) and with CUDA hidden
(predict mode) through `syncfree run`, the syncs per line must agree.
"""

import math
import os
import sys
import tempfile

import torch
import torch.nn.functional as F

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
VOCAB, BLOCK, EMBD, HEADS, LAYERS = 64, 16, 32, 4, 2


class CausalSelfAttention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = torch.nn.Linear(EMBD, 3 * EMBD)
        self.c_proj = torch.nn.Linear(EMBD, EMBD)
        self.register_buffer("bias", torch.tril(torch.ones(BLOCK, BLOCK)).view(1, 1, BLOCK, BLOCK))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(EMBD, dim=2)
        q, k, v = (t.view(B, T, HEADS, C // HEADS).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1, self.ln_2 = torch.nn.LayerNorm(EMBD), torch.nn.LayerNorm(EMBD)
        self.attn = CausalSelfAttention()
        self.mlp = torch.nn.Sequential(torch.nn.Linear(EMBD, 4 * EMBD), torch.nn.GELU(),
                                       torch.nn.Linear(4 * EMBD, EMBD))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = torch.nn.Embedding(VOCAB, EMBD), torch.nn.Embedding(BLOCK, EMBD)
        self.blocks = torch.nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln_f = torch.nn.LayerNorm(EMBD)
        self.lm_head = torch.nn.Linear(EMBD, VOCAB, bias=False)

    def forward(self, idx, targets=None):
        pos = torch.arange(0, idx.size(1), dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        loss = None if targets is None else F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1))
        return logits, loss


data = torch.randint(0, VOCAB, (4096,))


def get_batch():
    ix = torch.randint(len(data) - BLOCK, (8,))
    x = torch.stack([data[i:i + BLOCK] for i in ix])
    y = torch.stack([data[i + 1:i + 1 + BLOCK] for i in ix])
    return x.to(device), y.to(device)


model = GPT().to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
checkpoint = os.path.join(tempfile.mkdtemp(), "ckpt.pt")


@torch.no_grad()
def evaluate():
    model.eval()
    losses = torch.zeros(4)
    for k in range(4):
        x, y = get_batch()
        _, loss = model(x, y)
        losses[k] = loss.item()
    model.train()
    return losses.mean()


for step in range(6):
    x, y = get_batch()
    _, loss = model(x, y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    print(f"step {step}: loss {loss.item():.4f}")
    if step % 3 == 2:
        val = evaluate()
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "step": step, "val_loss": val}, checkpoint)

state = torch.load(checkpoint)
model.load_state_dict(state["model"])
optimizer.load_state_dict(state["optimizer"])
print("resumed at step", state["step"], file=sys.stderr)
