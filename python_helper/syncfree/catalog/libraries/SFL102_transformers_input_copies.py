'''## What it does
The transformers `Trainer` moves each batch to the GPU with a blocking copy. Its data loader is prepared by
accelerate, whose loader copies each batch as `Trainer.get_batch_samples` takes it (`next(epoch_iterator)` ->
`send_to_device(batch, device, non_blocking=False)` in `accelerate/utils/operations.py`); a loader the Trainer did not
prepare is copied by `Trainer._prepare_input` (`data.to(device=...)`), blocking as well.

## Why is this bad?
A blocking copy from host memory waits until the GPU has finished the work queued before it, so the next step's
input copy cannot overlap the current step's compute: one sync per input tensor per step (measured on an H100,
GPT-2 batches of `input_ids` and `labels`, 8 steps: 16 of the run's 42 syncs; 26 with the switch).

## Example
```python
args = TrainingArguments(output_dir="out", dataloader_pin_memory=False)
```

## Use instead
Let accelerate copy the batches from pinned memory without blocking: keep `dataloader_pin_memory=True` (the
default) and pass `accelerator_config={"non_blocking": True}`; the batch then arrives on the GPU and
`_prepare_input`'s copy is a no-op.
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
    # The Trainer's frame that takes the batch is outside accelerate's copy (SFL301), and the outermost listed frame
    # names the entry: under a Trainer the switch is the Trainer's (transformers/trainer.py, get_batch_samples since 4.46).
    sites=(LibrarySite("transformers/trainer.py", "Trainer.get_batch_samples", r"next\("),
           LibrarySite("transformers/trainer.py", "Trainer._prepare_input", r"\.to\(")),
)
