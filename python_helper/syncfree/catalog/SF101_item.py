"""## What it does
Checks for `Tensor.item()` on a CUDA tensor.

## Why is this bad?
`.item()` returns a Python number, so the CPU must wait until the GPU has finished every kernel queued before it and
copied the value back (`cudaMemcpyAsync` + `cudaStreamSynchronize`). While the CPU waits it queues no new work, so
the GPU runs dry right after. Once per logged step this is cheap; once per loop iteration it can cost more than the
kernels themselves (21.6 ms after an 8192×8192 matmul on an H200).

## Example
```python
for batch in loader:
    loss = train_step(batch)
    total += loss.item()
```

## Use instead
Keep the value on the GPU and read it rarely: accumulate into a tensor and convert once per epoch or every N steps.
Read several scalars needed at the same moment in one transfer (`torch.stack([...]).tolist()`, see SF910). If a
Python decision needs the value now, the sync is a true dependency; `torch.where` can often keep the decision on the
GPU instead.
```python
total = torch.zeros((), device="cuda")
for batch in loader:
    loss = train_step(batch)
    total += loss.detach()
print(total.item())  # one sync instead of one per step
```

## Fix safety
No automatic fix: where to read the value depends on what the code does with it.
"""

import ast
from collections.abc import Iterator

from syncfree.catalog import Match, Rule
from syncfree.catalog.scope import CellScope


def match(node: ast.AST, scope: CellScope) -> Iterator[Match]:
    method = scope.method_call(node)
    if method is None or method[1] != "item" or node.args or node.keywords:
        return
    certainty = scope.tensor_certainty(method[0], unknown=True)
    if certainty:
        yield Match(
            node,
            f"`{scope.snippet(node)}` copies the value to the CPU and waits for the GPU to finish the work queued before it",
            certainty,
        )


RULE = Rule.from_docstring(
    __doc__,
    code="SF101",
    name="item",
    title="`.item()` waits for the GPU",
    kind="item",
    dependency="true",
    cuda_call="cudaMemcpyAsync (device to host) + cudaStreamSynchronize",
    fix_safety="none",
    node_types=(ast.Call,),
    matcher=match,
    calls=("item",),
)
