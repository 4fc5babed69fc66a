"""## What it does
Checks for `torch.distributed.barrier()`.

## Why is this bad?
A barrier blocks the CPU until every rank has reached it; with NCCL it runs a small all-reduce and then synchronizes
the current stream (ProcessGroupNCCL's barrier waits on the device), so it also waits for all GPU work queued before
it. Inside a training loop it turns the slowest rank's every hiccup into everyone's stall.

## Example
```python
for batch in loader:
    loss = train_step(batch)
    dist.barrier()
```

## Use instead
Collectives already order the ranks' GPU work; keep barriers for setup and teardown (before reading files another
rank writes, before exit). For a rank-0-only step, let the others continue and synchronize through the next
collective.
```python
for batch in loader:
    loss = train_step(batch)
dist.barrier()  # once, before evaluation
```

## Fix safety
No automatic fix.
"""

import ast
from collections.abc import Iterator

from syncfree.catalog import Match, Rule
from syncfree.catalog.scope import CellScope


def _on_another_backend(node: ast.AST, scope: CellScope) -> bool:
    """Under ``if dist.get_backend() == "nccl": ... else:`` (or the body of ``!= "nccl"``): the code says the
    backend is not NCCL there (gloo's barrier waits for the ranks on the CPU, not for a GPU)."""
    child, parent = node, scope.parent(node)
    while parent is not None:
        if isinstance(parent, ast.If) and isinstance(parent.test, ast.Compare) and len(parent.test.ops) == 1:
            test = parent.test
            sides = [test.left, *test.comparators]
            backend = any(isinstance(s, ast.Call) and (scope.call_name(s) or "").endswith("get_backend") for s in sides)
            nccl = any(isinstance(s, ast.Constant) and s.value == "nccl" for s in sides)
            if backend and nccl:
                in_else = child in parent.orelse
                return in_else if isinstance(test.ops[0], ast.Eq) else not in_else if isinstance(test.ops[0], ast.NotEq) else False
        child, parent = parent, scope.parent(parent)
    return False


def match(node: ast.AST, scope: CellScope) -> Iterator[Match]:
    if (
        isinstance(node, ast.Call)
        # monitored_barrier is gloo's alone (torch.distributed docs): it waits for the ranks, never for a GPU
        and scope.call_name(node) == "torch.distributed.barrier"
        and not _on_another_backend(node, scope)
    ):
        yield Match(node, f"`{scope.snippet(node)}` blocks the CPU until every rank arrives and the GPU's queue drains", "certain")


RULE = Rule.from_docstring(
    __doc__,
    code="SF902",
    name="barrier",
    title="`dist.barrier()` blocks every rank's CPU",
    kind="distributed",
    dependency="true",
    cuda_call="NCCL all-reduce + cudaStreamSynchronize",
    fix_safety="none",
    node_types=(ast.Call,),
    matcher=match,
    calls=("barrier",),
)
