"""## What it does
Checks for `torch.histc` and `Tensor.histc` on CUDA tensors without a range (`min` and `max` left at 0, or
equal).

## Why is this bad?
Without a range, `histc` takes the input's minimum and maximum as the range and reads both back to the CPU to set up
its bins, so the CPU waits for the GPU twice per call (two syncs measured). With `min < max` given, the CUDA kernel
runs without reading anything back (aten/src/ATen/native/cuda/SummaryOps.cu).

## Example
```python
hist = torch.histc(activations, bins=64)
```

## Use instead
Pass the range when it is known (values outside it are not counted).
```python
hist = torch.histc(activations, bins=64, min=-4.0, max=4.0)
```

## Fix safety
No automatic fix: the range must come from the author, and values outside it are dropped.
"""

import ast
from collections.abc import Iterator

from syncfree.catalog import Match, Rule
from syncfree.catalog.scope import CellScope, keyword_value, number_literal


def _range(call: ast.Call, is_function: bool) -> tuple[ast.expr | None, ast.expr | None]:
    positional = call.args[1:] if is_function else call.args  # (bins, min, max) after the input
    low = positional[1] if len(positional) > 1 else keyword_value(call, "min")
    high = positional[2] if len(positional) > 2 else keyword_value(call, "max")
    return low, high


def match(node: ast.AST, scope: CellScope) -> Iterator[Match]:
    found = scope.tensor_operation(node, ("histc",), unknown_receiver=True)
    if found is None:
        return
    call, _, _, certainty = found
    low, high = _range(call, scope.call_name(call) is not None)
    # Both default to 0. torch reads the input's extremes back only when min == max (SummaryOps.cu); a range the
    # author wrote out (min=0, max=n - 1) is taken as a range: it does not sync (measured, sync-facts.md).
    low_value = 0 if low is None else number_literal(low)
    high_value = 0 if high is None else number_literal(high)
    if low_value is None or high_value is None or low_value != high_value:
        return
    what = "has no range" if low is None and high is None else f"has min == max ({low_value}): no range"
    yield Match(
        call,
        f"`{scope.snippet(call)}` {what}: it reads the input's minimum and maximum back to the CPU, waiting for the GPU",
        certainty,
    )


RULE = Rule.from_docstring(
    __doc__,
    code="SF607",
    name="histc-without-range",
    title="`histc` without min/max waits for the input's range",
    kind="histc",
    dependency="false",
    cuda_call="cudaMemcpyAsync (device to host) + cudaStreamSynchronize, twice",
    fix_safety="none",
    node_types=(ast.Call,),
    matcher=match,
    calls=("histc",),
)
