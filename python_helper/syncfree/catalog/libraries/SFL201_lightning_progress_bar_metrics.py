'''## What it does
A value logged with `self.log(..., prog_bar=True)` in a Lightning `training_step` is converted to a Python number
for the progress bar at every step (`_ResultCollection.metrics` calls `convert_tensors_to_scalars`, an `.item()`).

## Why is this bad?
`.item()` waits for the GPU to finish the step: the progress bar turns every step into a synchronization point.

## Example
```python
def training_step(self, batch, batch_idx):
    loss = self.loss(batch)
    self.log("train_loss", loss, prog_bar=True)
    return loss
```

## Use instead
Keep step values off the progress bar (or log them `on_step=False, on_epoch=True`, reduced once per epoch).
```python
def training_step(self, batch, batch_idx):
    loss = self.loss(batch)
    self.log("train_loss", loss, prog_bar=False)
    return loss
```

## Fix safety
The progress bar no longer shows the value each step; loggers still get it.
'''

from syncfree.catalog.libraries import LibraryEntry, LibrarySite

ENTRY = LibraryEntry.from_docstring(
    __doc__,
    code="SFL201",
    name="lightning-progress-bar-metrics",
    title="Lightning converts progress-bar metrics to Python numbers every step",
    package="lightning",
    kind="item",
    how_often="every step, once per prog_bar value",
    switch='self.log(..., prog_bar=False) or on_step=False, on_epoch=True',
    sites=(LibrarySite("pytorch/trainer/connectors/logger_connector/result.py", "_ResultCollection.metrics"),),
)
