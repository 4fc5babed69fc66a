"""## What it does
Checks for `torch.cuda.synchronize()` (and `torch.accelerator.synchronize()`).

## Why is this bad?
It blocks the CPU until every stream on the device has finished all queued work (`cudaDeviceSynchronize`). It is
needed for correct wall-clock timing, but left in a training loop it drains the GPU's queue every step. Note that
`torch.cuda.set_sync_debug_mode` does not report it: syncfree wraps it for the run.

## Example
```python
for batch in loader:
    loss = train_step(batch)
    torch.cuda.synchronize()
```

## Use instead
Remove it from the loop. To time GPU work, record CUDA events around it and wait once on the last event
(`Event.elapsed_time`); to make another stream wait, use `Event.wait()` or `Stream.wait_stream()`, which order work on
the GPU without blocking the CPU.
```python
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
start.record()
for batch in loader:
    loss = train_step(batch)
end.record()
end.synchronize()  # once
print(start.elapsed_time(end), "ms")
```

## Fix safety
No automatic fix: whether the wait is needed (timing, interop with other libraries) is the author's call.
"""

import ast
from collections.abc import Iterator

from syncfree.catalog import Match, Rule, callee_names
from syncfree.catalog.scope import CellScope

_SYNCHRONIZE = frozenset({"torch.cuda.synchronize", "torch.accelerator.synchronize"})


def match(node: ast.AST, scope: CellScope) -> Iterator[Match]:
    if isinstance(node, ast.Call) and scope.call_name(node) in _SYNCHRONIZE:
        yield Match(node, f"`{scope.snippet(node)}` blocks the CPU until the whole device is idle", "certain")


RULE = Rule.from_docstring(
    __doc__,
    code="SF801",
    name="cuda-synchronize",
    title="`torch.cuda.synchronize()` waits for the whole device",
    kind="explicit",
    dependency="false",
    cuda_call="cudaDeviceSynchronize",
    fix_safety="none",
    node_types=(ast.Call,),
    matcher=match,
    calls=callee_names(_SYNCHRONIZE),
)
