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

#: What a `possible` finding on a value of unknown kind says: the same method is NumPy's and pandas'.
_UNKNOWN_RECEIVER = (" (possible: NumPy arrays and pandas objects have `nonzero()` too, and the text does not say "
                     "this is a tensor)")


def match(node: ast.AST, scope: CellScope) -> Iterator[Match]:
    found = scope.tensor_operation(node, ("nonzero", "argwhere"))
    if found is None and scope.call_name(node) == "torch.where" and len(node.args) == 1 and not node.keywords:
        found = scope.tensor_operation(node, ("where",))
    reason = ""
    if found is None:
        # `(self.timesteps == t).nonzero()`: a tensor's method on a value the text does not type, as often a NumPy
        # array's: possible (off by default), with that reason.
        method = scope.method_call(node)
        if method is None or method[1] != "nonzero" or scope.value(method[0]).kind != "unknown":
            return
        found, reason = (node, method[0], "nonzero", "possible"), _UNKNOWN_RECEIVER
    call, _, name, certainty = found
    parent = scope.parent(call)
    counted = isinstance(parent, ast.Call) and scope.call_name(parent) == "builtins.len"
    yield Match(
        call,
        f"`{scope.snippet(call)}`: the output's size is the number of non-zero elements, copied to the CPU while it waits"
        + (" (len() only needs the count: count_nonzero() keeps it on the GPU)" if counted else "") + reason,
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
