"""## What it does
Checks for a slice whose bounds or step are CUDA tensors: `x[start:end]` with `start = offsets[i]` on the GPU.

## Why is this bad?
A slice needs Python integers, so each tensor bound is copied to the CPU while the CPU waits for the GPU: one sync
per bound (two for `x[i:j]`).

## Example
```python
offsets = torch.cumsum(lengths, 0)
start, end = offsets[i], offsets[i + 1]
segment = values[start:end]
```

## Use instead
Keep the offsets on the CPU when they are needed for slicing (compute them there, or transfer them all once with
`.tolist()`), or gather with an index built on the GPU (`torch.arange`, `index_select`), which needs no Python
integers.
```python
offsets = torch.cumsum(lengths, 0)
bounds = offsets.tolist()  # one sync for all segments
segments = [values[bounds[i]:bounds[i + 1]] for i in range(len(bounds) - 1)]
```

## Fix safety
No automatic fix.
"""

import ast
from collections.abc import Iterator

from syncfree.catalog import NO_MATCH, Match, Rule
from syncfree.catalog.scope import CellScope, index_parts


def match(node: ast.AST, scope: CellScope) -> Iterator[Match]:
    if not isinstance(node, ast.Subscript):
        return NO_MATCH
    bounds = [
        bound
        for part in index_parts(node)
        if isinstance(part, ast.Slice)
        for bound in (part.lower, part.upper, part.step)
        if bound is not None
    ]
    if not bounds:
        return NO_MATCH  # (most nodes this rule is shown: no generator for them)
    return _matches(node, scope, bounds)


def _matches(node: ast.Subscript, scope: CellScope, bounds: list[ast.expr]) -> Iterator[Match]:
    certainties = [scope.tensor_certainty(bound) for bound in bounds]
    count = sum(1 for c in certainties if c)
    if count:
        yield Match(
            node,
            f"`{scope.snippet(node)}` slices with {count} tensor bound{'s' if count > 1 else ''}: "
            "each is copied to the CPU while the CPU waits for the GPU",
            "certain" if "certain" in certainties else "likely",
        )


RULE = Rule.from_docstring(
    __doc__,
    code="SF503",
    name="slice-with-cuda-bounds",
    title="Slicing with CUDA tensor bounds waits for the GPU",
    kind="slice_bounds",
    dependency="true",
    cuda_call="cudaMemcpyAsync (device to host) + cudaStreamSynchronize, per bound",
    fix_safety="none",
    node_types=(ast.Subscript,),
    matcher=match,
)
