"""## What it does
Checks for `Tensor.tolist()` on a CUDA tensor.

## Why is this bad?
`.tolist()` builds Python numbers, so the tensor is copied to the CPU and the CPU waits for the GPU to finish the
work queued before it. Per element it is cheap (one transfer for the whole tensor), but called in a loop it is one
sync per iteration.

## Example
```python
for batch in loader:
    preds.extend(model(batch).argmax(1).tolist())
```

## Use instead
Collect results on the GPU and transfer them once, after the loop. When several values are needed at the same
moment, one `.tolist()` on a stacked tensor is one sync instead of one per value.
```python
chunks = [model(batch).argmax(1) for batch in loader]
preds = torch.cat(chunks).tolist()  # one sync
```

## Fix safety
No automatic fix: where the Python values are needed decides where to transfer.
"""

import ast
from collections.abc import Iterator

from syncfree.catalog import Match, Rule
from syncfree.catalog.scope import CellScope


def match(node: ast.AST, scope: CellScope) -> Iterator[Match]:
    method = scope.method_call(node)
    if method is None or method[1] != "tolist" or node.args:
        return
    certainty = scope.tensor_certainty(method[0], unknown=True)
    if certainty:
        yield Match(node, f"`{scope.snippet(node)}` copies the tensor to the CPU and waits for the GPU", certainty)


RULE = Rule.from_docstring(
    __doc__,
    code="SF204",
    name="tolist",
    title="`.tolist()` waits for the GPU",
    kind="tolist",
    dependency="true",
    cuda_call="cudaMemcpyAsync (device to host) + cudaStreamSynchronize",
    fix_safety="none",
    node_types=(ast.Call,),
    matcher=match,
    calls=("tolist",),
)
