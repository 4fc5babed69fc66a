'''## What it does
The transformers `Trainer` checks every training step's loss for NaN/Inf (`Trainer._inner_training_loop`, `Trainer._run_epoch` in 5.x:
`torch.isnan(tr_loss_step) or torch.isinf(tr_loss_step)`), a Python condition on a CUDA tensor.

## Why is this bad?
To decide the `or`, Python needs the tensor's value: the CPU waits for the GPU to finish the step's forward and
backward passes, every step, before it can queue the next step's work.

## Example
```python
args = TrainingArguments(output_dir="out", max_steps=1000)
Trainer(model=model, args=args, train_dataset=data).train()
```

## Use instead
Turn the filter off with `logging_nan_inf_filter=False`: the loss is then summed on the GPU as it is, and the check
costs nothing. A NaN loss then shows in the logged loss instead of being replaced by the running average.
```python
args = TrainingArguments(output_dir="out", max_steps=1000, logging_nan_inf_filter=False)
Trainer(model=model, args=args, train_dataset=data).train()
```

## Fix safety
An option of the library: the logged loss of a step with a NaN/Inf loss is NaN/Inf instead of the average of the
previous steps.
'''

from syncfree.catalog.libraries import LibraryEntry, LibrarySite

ENTRY = LibraryEntry.from_docstring(
    __doc__,
    code="SFL101",
    name="transformers-nan-inf-filter",
    title="The transformers Trainer checks each step's loss for NaN/Inf on the CPU",
    package="transformers",
    kind="python_bool",
    how_often="every training step",
    switch="TrainingArguments(logging_nan_inf_filter=False)",
    sites=(LibrarySite("transformers/trainer.py", None, r"isnan\(|isinf\("),),
)
