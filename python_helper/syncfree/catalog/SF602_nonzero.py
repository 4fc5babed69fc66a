"""## What it does
Checks for `torch.nonzero`, `Tensor.nonzero`, `torch.argwhere` and the one-argument `torch.where(cond)` on CUDA
tensors, including `nonzero(as_tuple=True)` and `len(t.nonzero())`.

## Why is this bad?
The number of non-zero elements decides the output's shape, so torch copies the count to the CPU and waits for the
GPU before it can allocate the result.

## Example
```python
n_pos = len(labels.nonzero())
rows = torch.nonzero(mask)
```

## Use instead
Count on the GPU with `mask.sum()` or `torch.count_nonzero` (a tensor, no sync). When the indices are needed and an
upper bound on their number is known, `torch.nonzero_static(mask, size=k)` pads to a fixed size without syncing.
Often the indices are not needed at all: `torch.where(mask, a, b)` or masked arithmetic keep the shape.
```python
n_pos = labels.count_nonzero()  # a GPU tensor
rows = torch.nonzero_static(mask, size=k, fill_value=-1)
```

## Fix safety
No automatic fix: a count tensor and padded indices are used differently from Python ints and exact indices.
"""

import ast
from collections.abc import Iterator

from syncfree.catalog import Match, Rule
from syncfree.catalog.scope import CellScope


def match(node: ast.AST, scope: CellScope) -> Iterator[Match]:
    found = scope.tensor_operation(node, ("nonzero", "argwhere"))
    if found is None and scope.call_name(node) == "torch.where" and len(node.args) == 1 and not node.keywords:
        found = scope.tensor_operation(node, ("where",))
    if found is None:
        return
    call, _, name, certainty = found
    parent = scope.parent(call)
    counted = isinstance(parent, ast.Call) and scope.call_name(parent) == "builtins.len"
    yield Match(
        call,
        f"`{scope.snippet(call)}`: the output's size is the number of non-zero elements, copied to the CPU while it waits"
        + (" (len() only needs the count: count_nonzero() keeps it on the GPU)" if counted else ""),
        certainty,
    )


RULE = Rule.from_docstring(
    __doc__,
    code="SF602",
    name="nonzero",
    title="`nonzero` waits for the number of non-zero elements",
    kind="nonzero",
    dependency="true",
    cuda_call="cudaMemcpyAsync (device to host) + cudaStreamSynchronize",
    fix_safety="none",
    node_types=(ast.Call,),
    matcher=match,
    calls=("nonzero", "argwhere", "where"),
)
