"""A Llama-style model from a config (grouped key/value heads, random weights): train steps with a padded
attention mask, labels at -100 and clip_grad_norm_, then a left-padded greedy generate. A workload of
tests/gpu/test_workloads_gpu.py."""

import torch
from transformers import LlamaConfig, LlamaForCausalLM

torch.manual_seed(0)
device = "cuda"
cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=128, max_position_embeddings=64, pad_token_id=0)
model = LlamaForCausalLM(cfg).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(3):
    ids = torch.randint(1, 128, (4, 16), device=device)
    mask = torch.ones_like(ids)
    mask[0, :4] = 0
    labels = ids.masked_fill(mask == 0, -100)
    out = model(input_ids=ids, attention_mask=mask, labels=labels)
    out.loss.backward()
    gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)
model.eval()
prompt = torch.randint(1, 128, (2, 6), device=device)
pmask = torch.ones_like(prompt)
pmask[1, :2] = 0
with torch.no_grad():
    gen = model.generate(input_ids=prompt, attention_mask=pmask, max_new_tokens=8, do_sample=False)
n_new = gen.shape[1] - prompt.shape[1]
print(n_new, float(gn))
