'''## What it does
A torchmetrics classification metric checks each batch's values on the host before it counts them (`validate_args=True`,
the default): `_multiclass_stat_scores_tensor_validation` counts the target's classes with `torch.unique` (binary and
multilabel metrics test the unique values with `torch.any`), once per `update()` and so once per `metric(preds, target)`.

## Why is this bad?
`torch.unique` has an output size that depends on the values: the CPU waits for the GPU at every update. On an H100
(`MulticlassAccuracy`, 8 batches and one `compute()`) the block syncs 25 times whether each step calls
`metric(preds, target)` or `update()`: the per-step value costs no sync, the update does. Besides this check, an
update counts with `torch.bincount`, which reads its input's range on the host (two syncs) whatever the options.

## Example
```python
accuracy = MulticlassAccuracy(num_classes=4).cuda()
for x, y in loader:
    accuracy.update(model(x), y)
```

## Use instead
Once the data are known to be valid (labels in range), turn the checks off.
```python
accuracy = MulticlassAccuracy(num_classes=4, validate_args=False).cuda()
for x, y in loader:
    accuracy.update(model(x), y)
```

## Fix safety
An option of the library: a label out of range is no longer reported with a clear error; it is counted wrongly or
fails in a kernel instead.
'''

from syncfree.catalog.libraries import LibraryEntry, LibrarySite

ENTRY = LibraryEntry.from_docstring(
    __doc__,
    code="SFL401",
    name="torchmetrics-input-validation",
    title="A torchmetrics metric checks each batch's values on the CPU (validate_args=True)",
    package="torchmetrics",
    kind="unique",
    how_often="every update() or metric(...) call",
    switch="validate_args=False when the metric is created",
    # The checks of torchmetrics/functional/classification/stat_scores.py (torchmetrics 1.x), on the lines that read
    # the values: the update's counting (`_bincount`) is not this entry's.
    sites=(LibrarySite("torchmetrics/functional/classification/", None, r"torch\.unique\(|torch\.any\("),),
)
