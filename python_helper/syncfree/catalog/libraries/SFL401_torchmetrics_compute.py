'''## What it does
A torchmetrics metric called as a function (`metric(preds, target)`) updates its state *and* computes the batch's
value; `compute()` reduces the state and, for many metrics, reads values on the host (checks, `.item()`, dynamic
shapes). Called every step, each compute synchronizes.

## Why is this bad?
The CPU waits for the GPU at every step's metric computation, which is only needed when the value is read.

## Example
```python
for x, y in loader:
    acc = accuracy(model(x), y)
```

## Use instead
Call `update()` each step (GPU only) and `compute()` once per epoch, where you read the value.
```python
for x, y in loader:
    accuracy.update(model(x), y)
epoch_acc = accuracy.compute()
```

## Fix safety
A rewrite of the loop: the per-batch value is no longer computed.
'''

from syncfree.catalog.libraries import LibraryEntry, LibrarySite

ENTRY = LibraryEntry.from_docstring(
    __doc__,
    code="SFL401",
    name="torchmetrics-compute",
    title="A torchmetrics metric computes (and reads) its value at each call",
    package="torchmetrics",
    kind="library",
    how_often="every call of metric(...) or compute()",
    switch="metric.update(...) each step, metric.compute() once per epoch",
    sites=(LibrarySite("torchmetrics/", None),),
)
