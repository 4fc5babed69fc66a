"""## What it does
Checks for `torch.nn.utils.clip_grad_norm_(..., error_if_nonfinite=True)`.

## Why is this bad?
To raise on a NaN or infinite norm, the function asks on the CPU whether the total norm is finite, which copies it
back and waits for the GPU every call. With the default `error_if_nonfinite=False` the clipping runs entirely on the
GPU (measured: no sync).

## Example
```python
norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, error_if_nonfinite=True)
```

## Use instead
Clip without the check and look at the returned norm when you log (every N steps), or let `GradScaler` skip
non-finite steps.
```python
norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
```

## Fix safety
The rewrite drops `error_if_nonfinite=True` and needs review: a non-finite norm no longer raises, so the step
continues with NaN/inf gradients unless something else checks.
"""

import ast
from collections.abc import Iterator

from syncfree.catalog import Edit, Fix, Match, Rule, callee_names
from syncfree.catalog.scope import CellScope, is_constant, keyword

_CLIPPERS = frozenset({"torch.nn.utils.clip_grad_norm_", "torch.nn.utils.clip_grad_norm", "torch.nn.utils.clip_grad.clip_grad_norm_"})


def match(node: ast.AST, scope: CellScope) -> Iterator[Match]:
    if not isinstance(node, ast.Call) or scope.call_name(node) not in _CLIPPERS:
        return
    flag = keyword(node, "error_if_nonfinite")
    positional_flag = node.args[3] if len(node.args) > 3 else None
    if not (flag is not None and is_constant(flag.value, True)) and not is_constant(positional_flag, True):
        return
    parameters = scope.value(node.args[0]) if node.args else None
    certainty = "certain" if parameters is not None and parameters.device == "cuda" else "likely"
    yield Match(
        node,
        f"`{scope.snippet(node)}` checks the norm on the CPU to raise on NaN/inf, waiting for the GPU",
        certainty,
        parts={"flag": flag},
    )


def rewrite(found: Match, scope: CellScope) -> Fix | None:
    flag: ast.keyword | None = found.parts["flag"]
    call: ast.Call = found.node  # type: ignore[assignment]
    if flag is None:
        return None  # passed positionally: leave it to the author
    items = sorted([*call.args, *call.keywords], key=lambda n: (n.lineno, n.col_offset))
    index = items.index(flag)
    if index == 0:
        return None
    previous = items[index - 1]
    # Delete from the end of the previous argument through the keyword, which removes the comma before it.
    edit = Edit((previous.end_lineno, previous.end_col_offset), (flag.end_lineno, flag.end_col_offset), "")  # type: ignore[arg-type]
    return Fix(
        "Drop error_if_nonfinite=True",
        "review",
        (edit,),
        "A non-finite gradient norm no longer raises: check the returned norm when logging, or rely on GradScaler.",
    )


RULE = Rule.from_docstring(
    __doc__,
    code="SF702",
    name="clip-grad-norm-error-if-nonfinite",
    title="`clip_grad_norm_(error_if_nonfinite=True)` waits for the norm",
    kind="library",
    dependency="false",
    cuda_call="cudaMemcpyAsync (device to host) + cudaStreamSynchronize",
    fix_safety="review",
    node_types=(ast.Call,),
    matcher=match,
    calls=callee_names(_CLIPPERS),
    rewrite=rewrite,
)
