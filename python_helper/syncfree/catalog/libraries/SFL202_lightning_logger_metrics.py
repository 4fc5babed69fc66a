'''## What it does
Every `log_every_n_steps` steps Lightning hands the logged values to the loggers as Python numbers
(`_LoggerConnector.log_metrics` calls `convert_tensors_to_scalars`: one `.item()` per logged value).

## Why is this bad?
Each `.item()` waits for the GPU. With `log_every_n_steps=1` that is every step and every value.

## Example
```python
trainer = L.Trainer(max_steps=1000, log_every_n_steps=1)
```

## Use instead
Write to the loggers less often (the default is 50), or turn the loggers off where nothing reads them.
```python
trainer = L.Trainer(max_steps=1000, log_every_n_steps=50)
```

## Fix safety
Options of the library: fewer logged points.
'''

from syncfree.catalog.libraries import LibraryEntry, LibrarySite

ENTRY = LibraryEntry.from_docstring(
    __doc__,
    code="SFL202",
    name="lightning-logger-metrics",
    title="Lightning converts logged values to Python numbers for the loggers",
    package="lightning",
    kind="item",
    how_often="every log_every_n_steps steps, once per logged value",
    switch="Trainer(log_every_n_steps=50) or logger=False",
    sites=(LibrarySite("pytorch/trainer/connectors/logger_connector/logger_connector.py",
                       "_LoggerConnector.log_metrics"),),
)
