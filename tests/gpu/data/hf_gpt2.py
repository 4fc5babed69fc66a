"""transformers: `generate` with a tiny random GPT-2, then two training steps with labels and
a padded attention mask. A workload of tests/gpu/test_workloads_gpu.py (needs transformers)."""

import torch
from transformers import GPT2Config, GPT2LMHeadModel

torch.manual_seed(0)
device = "cuda" if torch.cuda.is_available() else "cpu"
config = GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=100, n_positions=64,
                    bos_token_id=1, eos_token_id=None)
model = GPT2LMHeadModel(config).to(device).eval()
ids = torch.randint(3, 100, (2, 5), device=device)
# no eos: every run generates all 8 tokens whatever the numbers (CPU and GPU differ)
out = model.generate(ids, max_new_tokens=8, do_sample=False, pad_token_id=0)

model.train()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
mask = torch.ones(2, 8, dtype=torch.long, device=device)
mask[1, 6:] = 0
batch = torch.randint(3, 100, (2, 8), device=device)
for _ in range(2):
    loss = model(input_ids=batch, attention_mask=mask, labels=batch).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
