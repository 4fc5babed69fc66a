"""Train a tiny random GPT-2 with the transformers Trainer: the framework example.

    syncfree run examples/trainer_gpt2.py            # where the Trainer syncs, and the switch
    syncfree run examples/trainer_gpt2.py --no-nan-filter

Random weights and random tokens, no download. Every sync happens inside trainer.train();
syncfree shows the Trainer's own line under it (the per-step NaN/Inf check of the loss) with
the TrainingArguments flag that turns it off (catalog/libraries/SFL101).
"""

import sys
import tempfile

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config(vocab_size=128, n_positions=32, n_embd=32, n_layer=1, n_head=2))
data = [{"input_ids": ids, "labels": ids} for ids in torch.randint(0, 128, (64, 16))]
args = TrainingArguments(
    output_dir=tempfile.mkdtemp(), max_steps=8, per_device_train_batch_size=4, report_to=[],
    save_strategy="no", logging_steps=50, disable_tqdm=True,
    logging_nan_inf_filter="--no-nan-filter" not in sys.argv,
)
trainer = Trainer(model=model, args=args, train_dataset=data)
trainer.train()
