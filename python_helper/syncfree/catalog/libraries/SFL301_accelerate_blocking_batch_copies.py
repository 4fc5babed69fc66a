'''## What it does
accelerate's prepared data loader moves each batch to the device with `send_to_device`, a blocking `.to(device)`
unless the `Accelerator` was created with `non_blocking=True` in its `DataLoaderConfiguration`.

## Why is this bad?
A blocking copy from host memory waits for the GPU to finish the work queued before it: the next batch's copy
cannot overlap the current step. One sync per tensor of the batch, every step.

## Example
```python
accelerator = Accelerator()
loader = accelerator.prepare(DataLoader(data, batch_size=32))
```

## Use instead
Pin the loader's memory and let accelerate copy without blocking.
```python
accelerator = Accelerator(dataloader_config=DataLoaderConfiguration(non_blocking=True))
loader = accelerator.prepare(DataLoader(data, batch_size=32, pin_memory=True))
```

## Fix safety
Options of the library; pinned memory takes page-locked host memory per batch in flight.
'''

from syncfree.catalog.libraries import LibraryEntry, LibrarySite

ENTRY = LibraryEntry.from_docstring(
    __doc__,
    code="SFL301",
    name="accelerate-blocking-batch-copies",
    title="accelerate copies each batch to the device with a blocking copy",
    package="accelerate",
    kind="to_device",
    how_often="every step, once per batch tensor",
    switch="Accelerator(dataloader_config=DataLoaderConfiguration(non_blocking=True)) and DataLoader(pin_memory=True)",
    sites=(LibrarySite("accelerate/utils/operations.py", "send_to_device"),),
)
