"""## What it does
Checks for a module moved to the GPU: `model.cuda()`, `model.to("cuda")`. Off by default: it usually runs once.

## Why is this bad?
Moving a module copies each parameter and buffer with a blocking copy, one sync per tensor. Done once at setup this
does not matter; done inside a loop (re-creating or moving models per step, per fold or per request) it adds up.

## Example
```python
for fold in folds:
    model = Net().cuda()
```

## Use instead
Move the model once, or create it on the GPU directly (`torch.nn.Linear(..., device="cuda")`, or
`with torch.device("cuda"):` around the construction), which allocates the parameters there without copies.
```python
with torch.device("cuda"):
    model = Net()
```

## Fix safety
No automatic fix.
"""

import ast
from collections.abc import Iterator

from syncfree.catalog import Match, Rule
from syncfree.catalog.scope import CellScope
from syncfree.catalog.SF302_to_device_blocking import copy_to_cuda


def match(node: ast.AST, scope: CellScope) -> Iterator[Match]:
    found = copy_to_cuda(node, scope)
    if found is None or not scope.looks_like_module(found[0]):
        return
    receiver, certainty = found
    yield Match(
        node,
        f"`{scope.snippet(node)}` copies every parameter and buffer to the GPU, one blocking copy each",
        "certain" if scope.value(receiver).device == "cpu" else "likely",
    )


RULE = Rule.from_docstring(
    __doc__,
    code="SF303",
    name="module-to-device",
    title="Moving a module to the GPU syncs once per parameter",
    kind="to_device",
    dependency="false",
    cuda_call="cudaMemcpyAsync (host to device) + cudaStreamSynchronize, per parameter",
    fix_safety="none",
    node_types=(ast.Call,),
    matcher=match,
    calls=("cuda", "to"),
    enabled_by_default=False,
)
