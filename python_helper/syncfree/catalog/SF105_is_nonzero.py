"""## What it does
Checks for `torch.is_nonzero(t)` and `t.is_nonzero()` on a CUDA tensor.

## Why is this bad?
`is_nonzero` returns a Python bool, so the single element is copied to the CPU and the CPU waits for the GPU to
finish the work queued before it. It is the same sync as `bool(t)`.

## Example
```python
if torch.is_nonzero(found_inf):
    skip_step()
```

## Use instead
Keep the flag on the GPU and let it select values (`torch.where`, multiplying by the mask) or check it less often.
```python
update = torch.where(found_inf, torch.zeros_like(update), update)
```

## Fix safety
No automatic fix: the Python bool is what the code asks for.
"""

import ast
from collections.abc import Iterator

from syncfree.catalog import Match, Rule
from syncfree.catalog.scope import CellScope


def match(node: ast.AST, scope: CellScope) -> Iterator[Match]:
    if scope.call_name(node) == "torch.is_nonzero" and node.args:
        operand = node.args[0]
    else:
        method = scope.method_call(node)
        if method is None or method[1] != "is_nonzero":
            return
        operand = method[0]
    certainty = scope.tensor_certainty(operand, unknown=True)
    if certainty:
        yield Match(node, f"`{scope.snippet(node)}` returns a Python bool: the CPU waits for the GPU", certainty)


RULE = Rule.from_docstring(
    __doc__,
    code="SF105",
    name="is-nonzero",
    title="`torch.is_nonzero` waits for the GPU",
    kind="python_bool",
    dependency="true",
    cuda_call="cudaMemcpyAsync (device to host) + cudaStreamSynchronize",
    fix_safety="none",
    node_types=(ast.Call,),
    matcher=match,
    calls=("is_nonzero",),
)
