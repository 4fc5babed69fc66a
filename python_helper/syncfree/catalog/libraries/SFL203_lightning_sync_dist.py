'''## What it does
`self.log(..., sync_dist=True)` on step reduces the value across the ranks every time it is logged
(`_ResultMetric.update` calls the strategy's `reduce`, an all-reduce per value per step).

## Why is this bad?
Each logged value becomes a collective every step: every rank waits for the slowest one, and the reduced value is
then read on the host like any other logged value.

## Example
```python
self.log("train_loss", loss, on_step=True, sync_dist=True)
```

## Use instead
Reduce once per epoch: log the step value unsynchronized and the epoch value with `sync_dist=True`.
```python
self.log("train_loss", loss, on_step=False, on_epoch=True, sync_dist=True)
```

## Fix safety
The step value is then each rank's own; the epoch value is the reduced one.
'''

from syncfree.catalog.libraries import LibraryEntry, LibrarySite

ENTRY = LibraryEntry.from_docstring(
    __doc__,
    code="SFL203",
    name="lightning-sync-dist",
    title="Lightning reduces a sync_dist value across ranks every step",
    package="lightning",
    kind="distributed",
    how_often="every step, once per value logged with sync_dist=True",
    switch="self.log(..., on_step=False, on_epoch=True, sync_dist=True)",
    sites=(LibrarySite("pytorch/trainer/connectors/logger_connector/result.py", "_ResultMetric.update",
                       r"sync"),),
)
