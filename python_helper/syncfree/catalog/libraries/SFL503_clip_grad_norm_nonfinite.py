'''## What it does
`clip_grad_norm_(..., error_if_nonfinite=True)` asks on the host whether the total norm is finite, to raise; a
framework passing it (or a gradient-clipping callback that reads the norm) syncs every step.

## Why is this bad?
The norm is copied back and the CPU waits for the backward pass, every step. With the default
`error_if_nonfinite=False` clipping runs on the GPU alone.

## Example
```python
torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, error_if_nonfinite=True)
```

## Use instead
Clip without the check (Lightning's `gradient_clip_val`, transformers' `max_grad_norm` do) and look at the returned
norm when you log.
```python
torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
```

## Fix safety
A non-finite norm no longer raises.
'''

from syncfree.catalog.libraries import LibraryEntry, LibrarySite

ENTRY = LibraryEntry.from_docstring(
    __doc__,
    code="SFL503",
    name="clip-grad-norm-nonfinite",
    title="Gradient clipping checks the norm for NaN/Inf on the host",
    package="torch",
    kind="library",
    how_often="every optimizer step",
    switch="clip_grad_norm_(..., error_if_nonfinite=False) (the default)",
    sites=(LibrarySite("torch/nn/utils/clip_grad.py", None, r"isnan|isinf|nonfinite|logical_or"),),
)
