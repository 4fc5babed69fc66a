"""## What it does
Checks for `torch.distributed` collectives called without `async_op=True` (`all_reduce`, `all_gather`,
`broadcast`, `reduce_scatter`, ...) and for `Work.wait()` on an async collective's handle. Off by default: with the
NCCL backend these order work on the GPU and usually do not block the CPU. It is also the general entry for a
runtime sync inside `torch.distributed`.

## Why is this bad?
Whether a collective blocks the CPU depends on the backend: with NCCL, the call and `wait()` only make the current
stream wait for the communication (no CPU wait) unless `TORCH_NCCL_BLOCKING_WAIT=1` (SF905); with Gloo on CUDA
tensors, or with blocking wait enabled, the CPU waits for the whole collective. `set_sync_debug_mode` reports none of
these: at run time syncfree wraps `Work.wait()`, `barrier()` and the collectives and reports the calls that wait as
`distributed` syncs; on a CPU-only machine predict mode runs NCCL code on gloo and predicts them. What the CPU most
often waits for is the collective's result read on the host (SF904).

## Example
```python
dist.all_reduce(grad)
work = dist.all_reduce(stats, async_op=True)
work.wait()
```

## Use instead
Prefer NCCL for CUDA tensors and leave blocking wait off in production. Issue collectives with `async_op=True` and
wait as late as possible, so communication overlaps with computation; bucket small tensors into one collective.
```python
work = dist.all_reduce(grad, async_op=True)
loss = compute_more()
work.wait()  # with NCCL: the stream waits, not the CPU
```

## Fix safety
No automatic fix: where to wait depends on when the result is used.
"""

import ast
from collections.abc import Iterator

from syncfree.catalog import Match, Rule
from syncfree.catalog.scope import CellScope, is_constant, keyword_value

COLLECTIVES = frozenset(
    "torch.distributed." + name
    for name in (
        "all_reduce all_gather all_gather_into_tensor reduce_scatter reduce_scatter_tensor broadcast reduce "
        "all_to_all all_to_all_single gather scatter send recv"
    ).split()
)


def match(node: ast.AST, scope: CellScope) -> Iterator[Match]:
    if not isinstance(node, ast.Call):
        return
    name = scope.call_name(node)
    if name in COLLECTIVES:
        if is_constant(keyword_value(node, "async_op"), True):
            return
        message = f"`{scope.snippet(node)}` runs synchronously: with Gloo or blocking wait the CPU waits for the collective"
    else:
        method = scope.method_call(node)
        if method is None or method[1] != "wait" or scope.value(method[0]).kind != "work":
            return
        message = f"`{scope.snippet(node)}` waits for the collective: the CPU blocks with Gloo or blocking wait"
    yield Match(node, message, "likely")


RULE = Rule.from_docstring(
    __doc__,
    code="SF901",
    name="blocking-collective",
    title="A distributed collective may block the CPU",
    kind="distributed",
    dependency="true",
    cuda_call="NCCL/Gloo collective (cudaStreamSynchronize with blocking wait)",
    fix_safety="none",
    node_types=(ast.Call,),
    matcher=match,
    enabled_by_default=False,
)
