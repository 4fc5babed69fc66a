'''## What it does
The transformers `Trainer` moves each batch to the GPU with a blocking copy (`Trainer._prepare_input`:
`data.to(device=...)`, no `non_blocking`) when the data loader did not put it there already.

## Why is this bad?
A blocking copy from host memory waits until the GPU has finished the work queued before it, so the next step's
input copy cannot overlap the current step's compute: one sync per input tensor per step.

## Example
```python
args = TrainingArguments(output_dir="out", dataloader_pin_memory=False)
```

## Use instead
Let accelerate move the batches as the loader yields them, from pinned memory and without blocking: keep
`dataloader_pin_memory=True` (the default) and pass `accelerator_config={"non_blocking": True}`; the batch then
arrives on the GPU and `_prepare_input`'s copy is a no-op.
```python
args = TrainingArguments(output_dir="out", dataloader_pin_memory=True,
                         accelerator_config={"non_blocking": True})
```

## Fix safety
Options of the library; pinned memory takes page-locked host memory per batch in flight.
'''

from syncfree.catalog.libraries import LibraryEntry, LibrarySite

ENTRY = LibraryEntry.from_docstring(
    __doc__,
    code="SFL102",
    name="transformers-input-copies",
    title="The transformers Trainer copies each batch to the GPU with a blocking copy",
    package="transformers",
    kind="to_device",
    how_often="every step, once per input tensor",
    switch='TrainingArguments(dataloader_pin_memory=True, accelerator_config={"non_blocking": True})',
    sites=(LibrarySite("transformers/trainer.py", "Trainer._prepare_input", r"\.to\("),),
)
