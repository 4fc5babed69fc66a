"""## What it does
Checks for `torch.unique`, `Tensor.unique`, `torch.unique_consecutive` and `Tensor.unique_consecutive` on CUDA
tensors.

## Why is this bad?
The number of distinct values decides the output's size, so the CPU waits for the GPU to finish sorting and counting
before it can allocate the result.

## Example
```python
classes = torch.unique(labels)
counts = torch.stack([(labels == c).sum() for c in classes])
```

## Use instead
When the values come from a known range (class ids, token ids), count them into a fixed-size tensor with
`scatter_add_`/`index_add_` (or `F.one_hot(labels, num_classes).sum(0)`): the shape is known up front and nothing syncs.
```python
counts = torch.zeros(num_classes, dtype=torch.long, device=labels.device)
counts.scatter_add_(0, labels, torch.ones_like(labels))
```

## Fix safety
No automatic fix: the result's shape changes.
"""

import ast
from collections.abc import Iterator

from syncfree.catalog import Match, Rule
from syncfree.catalog.scope import CellScope


def match(node: ast.AST, scope: CellScope) -> Iterator[Match]:
    found = scope.tensor_operation(node, ("unique", "unique_consecutive"))
    if found:
        yield Match(
            found[0],
            f"`{scope.snippet(found[0])}`: the number of distinct values sizes the output, so the CPU waits for the GPU",
            found[3],
        )


RULE = Rule.from_docstring(
    __doc__,
    code="SF604",
    name="unique",
    title="`unique` waits for the number of distinct values",
    kind="unique",
    dependency="true",
    cuda_call="cudaMemcpyAsync (device to host) + cudaStreamSynchronize",
    fix_safety="none",
    node_types=(ast.Call,),
    matcher=match,
    calls=("unique", "unique_consecutive"),
)
