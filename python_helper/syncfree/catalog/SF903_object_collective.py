"""## What it does
Checks for the object collectives of `torch.distributed`: `all_gather_object`, `broadcast_object_list`,
`gather_object`, `scatter_object_list`, `send_object_list`, `recv_object_list`.

## Why is this bad?
They pickle Python objects into byte tensors, exchange the sizes first and read them on the CPU (`.item()`,
`.cpu()`) to allocate buffers, then unpickle on the CPU: several syncs per call, and they block until every rank
takes part.

## Example
```python
metrics = [None] * world_size
dist.all_gather_object(metrics, {"loss": loss.item()})
```

## Use instead
Exchange tensors: put numbers in a tensor on the GPU and use `all_reduce`/`all_gather_into_tensor`, reading the result
once on the CPU when it is needed.
```python
stats = torch.stack([loss_sum, count])
dist.all_reduce(stats)
```

## Fix safety
No automatic fix.
"""

import ast
from collections.abc import Iterator

from syncfree.catalog import Match, Rule, callee_names
from syncfree.catalog.scope import CellScope

_OBJECT_COLLECTIVES = frozenset(
    "torch.distributed." + name
    for name in "all_gather_object broadcast_object_list gather_object scatter_object_list send_object_list recv_object_list".split()
)


def match(node: ast.AST, scope: CellScope) -> Iterator[Match]:
    if isinstance(node, ast.Call) and scope.call_name(node) in _OBJECT_COLLECTIVES:
        yield Match(node, f"`{scope.snippet(node)}` exchanges pickled objects: it reads sizes on the CPU and waits for every rank", "certain")


RULE = Rule.from_docstring(
    __doc__,
    code="SF903",
    name="object-collective",
    title="Object collectives sync and block on the CPU",
    kind="distributed",
    dependency="true",
    cuda_call="cudaMemcpyAsync (device to host) + cudaStreamSynchronize, several",
    fix_safety="none",
    node_types=(ast.Call,),
    matcher=match,
    calls=callee_names(_OBJECT_COLLECTIVES),
)
