"""## What it does
Checks for `torch.masked_select(x, mask)` and `x.masked_select(mask)` on CUDA tensors.

## Why is this bad?
The output has one element per `True` in the mask, a number only the GPU knows: torch copies it to the CPU and waits
before allocating the result.

## Example
```python
valid = torch.masked_select(losses, mask)
mean = valid.mean()
```

## Use instead
Keep the full shape and let the mask weight the values: `torch.where(mask, x, 0)`, `x * mask`, `masked_fill`, then
reduce with the mask's count.
```python
mean = (losses * mask).sum() / mask.sum().clamp(min=1)
```

## Fix safety
No automatic fix: the shape of the result changes.
"""

import ast
from collections.abc import Iterator

from syncfree.catalog import Match, Rule
from syncfree.catalog.scope import CellScope


def match(node: ast.AST, scope: CellScope) -> Iterator[Match]:
    found = scope.tensor_operation(node, ("masked_select",), unknown_receiver=True)
    if found:
        yield Match(
            found[0],
            f"`{scope.snippet(found[0])}` has as many elements as the mask has True values: the CPU waits for that count",
            found[3],
        )


RULE = Rule.from_docstring(
    __doc__,
    code="SF603",
    name="masked-select",
    title="`masked_select` waits for the number of selected elements",
    kind="masked_select",
    dependency="true",
    cuda_call="cudaMemcpyAsync (device to host) + cudaStreamSynchronize",
    fix_safety="none",
    node_types=(ast.Call,),
    matcher=match,
    calls=("masked_select",),
)
