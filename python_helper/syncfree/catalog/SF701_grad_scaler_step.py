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
No automatic fix: the optimizer is created elsewhere.
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
    kind = scope.value(receiver).kind
    if kind == "grad_scaler":
        certainty = "certain"
    elif kind == "unknown" and isinstance(receiver, (ast.Name, ast.Attribute)) and "scaler" in scope.text(receiver).lower():
        certainty = "likely"
    else:
        return
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
