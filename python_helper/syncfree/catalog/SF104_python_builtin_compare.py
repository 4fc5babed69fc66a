"""## What it does
Checks for Python's `max`, `min`, `sorted`, `any` and `all` applied to CUDA tensors: `max(a, b)`, `min(loss, best)`,
`any(t)`.

## Why is this bad?
The builtins compare with Python's `>`/`<` or ask for truth values, so every comparison is a GPU result copied to
the CPU while the CPU waits: `max(a, b)` syncs once, `max(t)` or `any(t)` over a tensor once per element.

## Example
```python
val_acc = torch.mean((preds == labels).float())
best = max(best, val_acc)
```

## Use instead
The torch functions compute on the GPU and return a tensor: `torch.max(a, b)` (elementwise, like
`torch.maximum`), `torch.min(a, b)`, `t.max()`, `t.any()`, `t.all()`, `torch.sort(t)`.
```python
val_acc = torch.mean((preds == labels).float())
best = torch.max(best, val_acc)  # best: a 0-dim tensor on the GPU
```

## Fix safety
The rewrite of `max(a, b)`/`min(a, b)` to `torch.max(a, b)`/`torch.min(a, b)` is offered only when both operands
are tensors, and needs review: Python's `max` returns one of the two tensor objects, torch's returns a new tensor,
propagates NaN (Python's `max(a, nan)` returns `a`) and broadcasts and promotes shapes and dtypes.
"""

import ast
from collections.abc import Iterator

from syncfree.catalog import Edit, Fix, Match, Rule, callee_names
from syncfree.catalog.scope import CellScope

_BUILTINS = {"builtins.max", "builtins.min", "builtins.sorted", "builtins.any", "builtins.all"}


def match(node: ast.AST, scope: CellScope) -> Iterator[Match]:
    name = scope.call_name(node)
    if name not in _BUILTINS:
        return
    certainties = [scope.tensor_certainty(argument) for argument in node.args]
    certainty = "certain" if "certain" in certainties else "likely" if "likely" in certainties else None
    if certainty is None:
        return
    short = name.split(".")[1]
    if short in ("any", "all"):
        how = "asks each element for its truth value on the CPU: one sync per element"
    elif len(node.args) == 1:
        how = "compares its elements one by one on the CPU: one sync per element"
    else:
        how = "compares tensors with Python's `>`/`<`: the CPU waits for each result"
    yield Match(node, f"`{scope.snippet(node)}`: Python's {short}() {how}", certainty)


def rewrite(found: Match, scope: CellScope) -> Fix | None:
    call = found.node
    name = scope.call_name(call)
    if name not in ("builtins.max", "builtins.min") or len(call.args) != 2 or call.keywords:
        return None
    if not all(scope.value(argument).is_tensor for argument in call.args):
        return None  # torch.max(t, 0.5) is a reduction over dim 0.5: only tensor pairs map over
    function = f"{scope.torch}.{name.split('.')[1]}"
    return Fix(
        f"Use {function}(a, b) on the GPU",
        "review",
        (Edit.replace(call.func, function),),
        "torch.max/min return a new tensor (not one of the operands), propagate NaN, and broadcast and promote "
        "the operands' shapes and dtypes; Python's max returned the operand object itself.",
    )


RULE = Rule.from_docstring(
    __doc__,
    code="SF104",
    name="python-builtin-on-tensors",
    title="Python's max/min/any/all/sorted on CUDA tensors wait for the GPU",
    kind="python_bool",
    dependency="false",
    cuda_call="cudaMemcpyAsync (device to host) + cudaStreamSynchronize",
    fix_safety="review",
    node_types=(ast.Call,),
    matcher=match,
    calls=callee_names(_BUILTINS),
    rewrite=rewrite,
)
