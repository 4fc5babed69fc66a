'''## What it does
`torch.save` of a state dict (or any object) holding CUDA tensors copies each tensor to the host with a blocking
copy while it serializes (`torch/serialization.py`): one sync per tensor, at each checkpoint.

## Why is this bad?
A checkpoint of a model with hundreds of tensors stalls the GPU pipeline hundreds of times. Paid at each save, not
each step, so it matters when checkpoints are frequent.

## Example
```python
torch.save(model.state_dict(), "ckpt.pt")
```

## Use instead
Copy the whole state dict to pinned host memory without blocking, wait once, then save.
```python
state = {k: v.to("cpu", non_blocking=True) for k, v in model.state_dict().items()}
torch.cuda.current_stream().synchronize()
torch.save(state, "ckpt.pt")
```

## Fix safety
A rewrite: the one synchronize must come before the host copies are read.
'''

from syncfree.catalog.libraries import LibraryEntry, LibrarySite

ENTRY = LibraryEntry.from_docstring(
    __doc__,
    code="SFL501",
    name="torch-save-cuda-tensors",
    title="torch.save copies each CUDA tensor to the host with a blocking copy",
    package="torch",
    kind="to_host",
    how_often="once per tensor at each checkpoint",
    switch="copy the state dict with .to('cpu', non_blocking=True), one synchronize, then torch.save",
    sites=(LibrarySite("torch/serialization.py", "save"),),
)
