"""BERT sequence classification from a config (random weights): train steps with a LambdaLR schedule,
then an evaluation loop that brings predictions back with .cpu(). A workload of tests/gpu/test_workloads_gpu.py."""

import torch
from transformers import BertConfig, BertForSequenceClassification

torch.manual_seed(0)
device = "cuda"
cfg = BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
                 vocab_size=128, max_position_embeddings=64, num_labels=3)
model = BertForSequenceClassification(cfg).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
for step in range(3):
    ids = torch.randint(1, 128, (4, 12), device=device)
    mask = torch.ones_like(ids)
    mask[:, 9:] = 0
    labels = torch.randint(0, 3, (4,), device=device)
    out = model(input_ids=ids, attention_mask=mask, labels=labels)
    out.loss.backward()
    opt.step()
    sched.step()
    opt.zero_grad()
model.eval()
preds, golds = [], []
with torch.no_grad():
    for step in range(2):
        ids = torch.randint(1, 128, (4, 12), device=device)
        logits = model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
        preds.append(logits.argmax(-1).cpu())
        golds.append(torch.randint(0, 3, (4,)))
acc = (torch.cat(preds) == torch.cat(golds)).float().mean()
print(float(acc))
