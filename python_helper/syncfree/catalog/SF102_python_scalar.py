"""## What it does
Checks for a CUDA tensor converted to a Python number: `float(t)`, `int(t)`, `complex(t)`, `range(t)`, `math.*(t)`,
or a CUDA tensor passed where torch expects a Python size (`torch.zeros(n)` with `n` on the GPU).

## Why is this bad?
A Python number lives on the CPU, so the conversion copies the value back and waits for the GPU to finish all work
queued before it, exactly like `.item()` (both reach `aten._local_scalar_dense`). The call hides the sync: it reads
like plain Python.

## Example
```python
counts = torch.bincount(labels, minlength=10)
steps = int(counts.sum())
```

## Use instead
Keep the arithmetic in tensors (`counts.sum()` stays on the GPU) and convert only where the CPU truly needs the
number, once. Sizes known on the CPU (from shapes or configuration) need no conversion at all.
```python
counts = torch.bincount(labels, minlength=10)
total = counts.sum()  # a GPU tensor: no sync
scale = 1.0 / total.clamp(min=1)
```

## Fix safety
No automatic fix: the Python number is needed by the code that follows.
"""

import ast
import math
from collections.abc import Iterator

from syncfree.catalog import Match, Rule, callee_names
from syncfree.catalog.scope import FACTORIES, CellScope

_CONVERSIONS = frozenset({"builtins.float", "builtins.int", "builtins.complex", "builtins.range", "operator.index"})
# Factories whose positional arguments are sizes or bounds (torch.tensor/as_tensor take data instead).
_SIZE_FACTORIES = frozenset(
    name for name in FACTORIES if not name.endswith("_like") and name.rsplit(".", 1)[1] not in
    ("tensor", "as_tensor", "asarray", "from_numpy", "frombuffer", "full", "normal")
) | {"torch.full"}


def match(node: ast.AST, scope: CellScope) -> Iterator[Match]:
    name = scope.call_name(node)
    if name is None:
        return
    if name in _CONVERSIONS or name.startswith("math."):
        arguments = node.args
        what = "turns a tensor into a Python number"
    elif name in _SIZE_FACTORIES:
        arguments = node.args[:1] if name == "torch.full" else node.args
        what = "reads a CUDA tensor as a Python size"
    else:
        return
    certainties = [scope.tensor_certainty(argument) for argument in arguments if not isinstance(argument, ast.Starred)]
    if name in _SIZE_FACTORIES:
        # only a tensor known on CUDA, or a value that is a tensor on some paths (`n: int | Tensor`: possible)
        certainties = [c if c in ("certain", "possible") else None for c in certainties]
    # (the call's text only for a match: most int(), range() and torch.zeros() calls are none)
    if "certain" in certainties or "likely" in certainties:
        yield Match(
            node,
            f"`{scope.snippet(node)}` {what}: the CPU copies it back and waits for the GPU",
            "certain" if "certain" in certainties else "likely",
        )
    elif "possible" in certainties:
        yield Match(node, f"`{scope.snippet(node)}` {what}: the CPU copies it back and waits for the GPU", "possible")


RULE = Rule.from_docstring(
    __doc__,
    code="SF102",
    name="python-scalar-conversion",
    title="Converting a CUDA tensor to a Python number waits for the GPU",
    kind="python_scalar",
    dependency="true",
    cuda_call="cudaMemcpyAsync (device to host) + cudaStreamSynchronize",
    fix_safety="none",
    node_types=(ast.Call,),
    matcher=match,
    calls=callee_names(_CONVERSIONS | _SIZE_FACTORIES) | {name for name in dir(math) if not name.startswith("_")},
)
