"""## What it does
Checks for `torch.bincount` and `Tensor.bincount` on CUDA tensors, with or without `minlength`.

## Why is this bad?
The number of bins is `max(input) + 1` (at least `minlength`), a value only the GPU knows: torch reads the maximum
back to the CPU before it can allocate the output (two syncs measured per call, also with `minlength`).

## Example
```python
counts = torch.bincount(labels, minlength=num_classes)
```

## Use instead
When the number of bins is known, count into a fixed-size tensor with `scatter_add_` (or `index_add_`): no value
needs to reach the CPU.
```python
counts = torch.zeros(num_classes, dtype=torch.long, device=labels.device)
counts.scatter_add_(0, labels, torch.ones_like(labels))
```

## Fix safety
No automatic fix: the number of bins must come from the author (values at or above it would be lost or raise).
"""

import ast
from collections.abc import Iterator

from syncfree.catalog import Match, Rule
from syncfree.catalog.scope import CellScope


def match(node: ast.AST, scope: CellScope) -> Iterator[Match]:
    found = scope.tensor_operation(node, ("bincount",), unknown_receiver=False)
    if found:
        yield Match(
            found[0],
            f"`{scope.snippet(found[0])}` reads the input's maximum back to the CPU to size its output, waiting for the GPU",
            found[3],
        )


RULE = Rule.from_docstring(
    __doc__,
    code="SF606",
    name="bincount",
    title="`bincount` waits for the input's maximum",
    kind="bincount",
    dependency="false",
    cuda_call="cudaMemcpyAsync (device to host) + cudaStreamSynchronize, twice",
    fix_safety="none",
    node_types=(ast.Call,),
    matcher=match,
    calls=("bincount",),
)
