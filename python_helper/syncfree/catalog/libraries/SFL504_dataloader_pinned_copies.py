'''## What it does
A batch from a `DataLoader` without `pin_memory=True` lives in pageable host memory, and copying it to the GPU
(`batch.to("cuda")`, `.cuda()`) blocks, even with `non_blocking=True`. With pinned memory and `non_blocking=True`
the copy is queued and the CPU goes on.

## Why is this bad?
One sync per batch tensor per step: the copy of the next batch cannot overlap the current step's compute.

## Example
```python
for x, y in DataLoader(data, batch_size=64):
    x, y = x.to("cuda"), y.to("cuda")
```

## Use instead
Pin the loader's memory and copy without blocking.
```python
for x, y in DataLoader(data, batch_size=64, pin_memory=True):
    x, y = x.to("cuda", non_blocking=True), y.to("cuda", non_blocking=True)
```

## Fix safety
Pinned memory takes page-locked host memory per batch in flight.
'''

from syncfree.catalog.libraries import LibraryEntry, LibrarySite

ENTRY = LibraryEntry.from_docstring(
    __doc__,
    code="SFL504",
    name="dataloader-pinned-copies",
    title="Batches from pageable memory are copied to the GPU with blocking copies",
    package="torch",
    kind="to_device",
    how_often="every step, once per batch tensor",
    switch="DataLoader(pin_memory=True) and .to(device, non_blocking=True)",
    sites=(LibrarySite("torch/utils/data/_utils/pin_memory.py", None),
           LibrarySite("lightning/fabric/utilities/apply_func.py", "move_data_to_device"),
           LibrarySite("lightning/pytorch/core/hooks.py", "DataHooks.transfer_batch_to_device")),
)
