"""## What it does
Checks for `torch.allclose(a, b)` and `a.allclose(b)` on CUDA tensors.

## Why is this bad?
`allclose` returns a Python bool, so the comparison's result is copied to the CPU and the CPU waits for the GPU to
finish the work queued before it.

## Example
```python
if not torch.allclose(out, ref, atol=1e-4):
    raise ValueError("mismatch")
```

## Use instead
Keep the check on the GPU with `torch.isclose(a, b).all()` (a bool tensor) and read it rarely, for example once after
a loop or only in a debug build. Outside hot loops the sync is harmless.
```python
ok = torch.isclose(out, ref, atol=1e-4).all()  # a GPU tensor
...
assert ok.item(), "mismatch"  # one sync, where you choose
```

## Fix safety
No automatic fix: the Python bool is what the code asks for.
"""

import ast
from collections.abc import Iterator

from syncfree.catalog import Match, Rule
from syncfree.catalog.scope import CellScope


def match(node: ast.AST, scope: CellScope) -> Iterator[Match]:
    found = scope.tensor_operation(node, ("allclose",))
    if found:
        yield Match(found[0], f"`{scope.snippet(found[0])}` returns a Python bool: the CPU waits for the GPU", found[3])


RULE = Rule.from_docstring(
    __doc__,
    code="SF703",
    name="allclose",
    title="`allclose` waits for the GPU",
    kind="allclose",
    dependency="true",
    cuda_call="cudaMemcpyAsync (device to host) + cudaStreamSynchronize",
    fix_safety="none",
    node_types=(ast.Call,),
    matcher=match,
    calls=("allclose",),
)
