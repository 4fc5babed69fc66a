'''## What it does
`GradScaler.step(optimizer)` reads whether the unscaled gradients hold an Inf/NaN (`found_inf.item()` in
`GradScaler._maybe_opt_step`) to decide whether to step: frameworks call it for you in fp16 mixed precision
(Lightning's `precision="16-mixed"`, accelerate's `mixed_precision="fp16"`, transformers' `fp16=True`).

## Why is this bad?
One sync every optimizer step, after the backward pass: the CPU cannot queue the next step until the GPU is done.

## Example
```python
trainer = L.Trainer(precision="16-mixed")
```

## Use instead
On GPUs with bfloat16 (Ampere and later) train in bf16: no loss scaling, no scaler, no check.
```python
trainer = L.Trainer(precision="bf16-mixed")
```

## Fix safety
A change of numerics: bf16 has fewer mantissa bits than fp16 and needs no scaling.
'''

from syncfree.catalog.libraries import LibraryEntry, LibrarySite

ENTRY = LibraryEntry.from_docstring(
    __doc__,
    code="SFL502",
    name="grad-scaler-inf-check",
    title="fp16 mixed precision reads GradScaler's Inf/NaN check every step",
    package="torch",
    kind="item",
    how_often="every optimizer step",
    switch='bf16 mixed precision (precision="bf16-mixed", mixed_precision="bf16", bf16=True)',
    sites=(LibrarySite("torch/amp/grad_scaler.py", "GradScaler.step"),),
)
