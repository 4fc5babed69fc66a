"""## What it does
Checks for `GradScaler.step(optimizer)` (automatic mixed precision with float16).

## Why is this bad?
To skip the step when gradients overflowed, `GradScaler.step` asks on the CPU whether any `found_inf` flag is set,
which copies the flags back and waits for the GPU: one sync per optimizer step (torch/amp/grad_scaler.py,
`_maybe_opt_step`). It is a true dependency for optimizers that step on the CPU's decision.

## Example
```python
scaler.scale(loss).backward()
scaler.step(optimizer)
scaler.update()
```

## Use instead
Use an optimizer that takes the overflow flag on the GPU: `torch.optim.Adam`/`AdamW`/`SGD` with `fused=True`
support AMP scaling (`_step_supports_amp_scaling`), and `GradScaler.step` then passes `found_inf` to the kernel
instead of reading it. With bfloat16 autocast no scaler is needed at all.
```python
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
scaler.scale(loss).backward()
scaler.step(optimizer)  # no sync with a fused optimizer
scaler.update()
```

## Fix safety
No automatic fix: the optimizer is created elsewhere. A step is certain only when the code shows a GradScaler and an
optimizer built without `fused=True`; with an optimizer built elsewhere it is likely.
"""

import ast
from collections.abc import Iterator

from syncfree.catalog import Match, Rule
from syncfree.catalog.scope import CellScope


def match(node: ast.AST, scope: CellScope) -> Iterator[Match]:
    method = scope.method_call(node)
    if method is None or method[1] != "step" or not node.args:
        return
    receiver = method[0]
    scaler = scope.value(receiver)
    if scaler.kind == "grad_scaler":
        if scaler.const == "off":
            return  # enabled=False, or a CPU scaler: nothing is read back from a GPU
        certainty = "certain"
    elif scaler.kind == "unknown" and isinstance(receiver, (ast.Name, ast.Attribute)) and "scaler" in scope.text(receiver).lower():
        certainty = "likely"
    else:
        return
    optimizer = scope.value(node.args[0])
    if optimizer.kind == "optimizer" and optimizer.const == "fused":
        return  # a fused optimizer takes found_inf on the GPU: no sync (measured with fused AdamW, sync-facts.md)
    if optimizer.kind != "optimizer":
        certainty = "likely"  # an optimizer the text does not show may be a fused one
    yield Match(
        node,
        f"`{scope.snippet(node)}` reads the inf/NaN check on the CPU to decide whether to step, waiting for the GPU",
        certainty,
    )


RULE = Rule.from_docstring(
    __doc__,
    code="SF701",
    name="grad-scaler-step",
    title="`GradScaler.step` waits for the overflow check",
    kind="library",
    dependency="true",
    cuda_call="cudaMemcpyAsync (device to host) + cudaStreamSynchronize",
    fix_safety="none",
    node_types=(ast.Call,),
    matcher=match,
    calls=("step",),
)
