"""## What it does
Checks for `torch.repeat_interleave` / `Tensor.repeat_interleave` with a tensor of repeats and no `output_size`.

## Why is this bad?
The output's length is the sum of the repeats, computed on the GPU: torch copies it to the CPU and waits before it
can allocate the result (two syncs measured per call). With a Python int as the repeat count, or with
`output_size=` given, nothing syncs.

## Example
```python
expanded = torch.repeat_interleave(values, mask.sum(dim=1), dim=0)
```

## Use instead
Pass `output_size=` when the total is known on the CPU (a fixed batch layout, a sum computed where the counts were
built).
```python
expanded = torch.repeat_interleave(values, mask.sum(dim=1), dim=0, output_size=total)
```

## Fix safety
The fix adds `output_size=` only when the repeats are constants the cell spells out (`torch.tensor([...])`,
`torch.full((n,), k)`, `torch.arange(a, b)`), so the size is exactly their sum and the result is unchanged.
"""

import ast
from collections.abc import Iterator

from syncfree.catalog import Fix, Match, Rule
from syncfree.catalog.scope import CellScope, keyword, keyword_value


def _repeats(call: ast.Call, operand: ast.expr, scope: CellScope) -> ast.expr | None:
    """The repeats argument; for the one-argument form ``torch.repeat_interleave(r)`` the operand itself."""
    is_function = scope.call_name(call) is not None
    positional = call.args[1:] if is_function else call.args
    if positional:
        return positional[0]
    given = keyword_value(call, "repeats")
    if given is not None:
        return given
    return operand if is_function and len(call.args) == 1 else None


def _tensor_shaped(repeats: ast.expr) -> bool:
    """Repeats written the way a tensor of counts is: ``lengths[:, 0]``, ``mask.sum(dim=1)``, ``counts.long()``."""
    return isinstance(repeats, ast.Subscript) or (
        isinstance(repeats, ast.Call) and isinstance(repeats.func, ast.Attribute)
    )


def match(node: ast.AST, scope: CellScope) -> Iterator[Match]:
    found = scope.tensor_operation(node, ("repeat_interleave",))
    if found is None or keyword(node, "output_size") is not None:
        return
    call, operand, _, certainty = found
    repeats = _repeats(call, operand, scope)
    kind = scope.value(repeats).kind if repeats is not None else None
    if kind not in ("tensor", "unknown"):
        return  # an int repeat count (repeat_interleave.self_int) does not sync
    if kind == "unknown":
        if not _tensor_shaped(repeats):
            return  # a name or arithmetic the text does not tell: mostly an int count (repeat_interleave.self_int)
        certainty = "likely"  # an index or a method's result: a tensor of counts, on a device the text does not say
    elif scope.value(repeats).device == "cuda":
        certainty = "certain"
    yield Match(
        call,
        f"`{scope.snippet(call)}` sums the repeats on the GPU to size its output: the CPU waits (pass output_size=)",
        certainty,
        parts={"repeats": repeats},
    )


def rewrite(found: Match, scope: CellScope) -> Fix | None:
    repeats = scope.value(found.parts["repeats"]).int_data
    call: ast.Call = found.node  # type: ignore[assignment]
    if repeats is None or not repeats or any(k.arg is None for k in call.keywords):
        return None
    is_function = scope.call_name(call) is not None
    single_argument_form = is_function and len(call.args) == 1 and not call.keywords
    if len(repeats) == 1 and not single_argument_form:
        return None  # one repeat count broadcasts over the input, whose size the text does not tell
    return Fix(
        f"Pass output_size={sum(repeats)}",
        "safe",
        (scope.append_keyword(call, f"output_size={sum(repeats)}"),),
    )


RULE = Rule.from_docstring(
    __doc__,
    code="SF605",
    name="repeat-interleave-without-output-size",
    title="`repeat_interleave` with tensor repeats waits for the output size",
    kind="repeat_interleave",
    dependency="false",
    cuda_call="cudaMemcpyAsync (device to host) + cudaStreamSynchronize, twice",
    fix_safety="safe",
    node_types=(ast.Call,),
    matcher=match,
    calls=("repeat_interleave",),
    rewrite=rewrite,
)
