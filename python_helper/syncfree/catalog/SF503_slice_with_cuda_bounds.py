"""## What it does
Checks for CUDA tensors read as Python integers in an index: the bounds or step of a slice (`x[start:end]` with
`start = offsets[i]` on the GPU), and a 0-dim CUDA tensor used as an index (`x[i]` with `i = scores.argmax()`).

## Why is this bad?
A slice needs Python integers, so each tensor bound is copied to the CPU while the CPU waits for the GPU: one sync
per bound (two for `x[i:j]`). A 0-dim integer (or bool) index is read the same way: torch selects with
`index.item()` (ATen's `applySelect`), not with an index kernel.

## Example
```python
offsets = torch.cumsum(lengths, 0)
start, end = offsets[i], offsets[i + 1]
segment = values[start:end]
```

## Use instead
Keep the offsets on the CPU when they are needed for slicing (compute them there, or transfer them all once with
`.tolist()`), or gather with an index built on the GPU (`torch.arange`, `index_select`), which needs no Python
integers. A 0-dim index selects without a sync as a 1-element index tensor: `x.index_select(0, i.view(1))`
(or `x[i.view(1)]`), which keeps the selected dimension.
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
from syncfree.catalog.scope import CellScope, strongest

#: Index parts that are never a tensor read as an integer: a number, None, an Ellipsis, a string, a list; and a slice,
#: whose bounds are looked at instead (by the node's class: a parsed tree holds no subclasses).
_NOT_SCALAR = frozenset({ast.Constant, ast.List, ast.ListComp, ast.Tuple, ast.Slice})


def match(node: ast.AST, scope: CellScope) -> Iterator[Match]:
    if type(node) is not ast.Subscript:
        return NO_MATCH
    index = node.slice  # type: ignore[attr-defined]
    if type(index) is ast.Constant:
        return NO_MATCH  # x[0], x["key"] (most nodes this rule is shown: no generator for them, nor any list)
    bounds: list[ast.expr] = []
    scalars: list[ast.expr] = []
    for part in index.elts if type(index) is ast.Tuple else (index,):  # (index_parts)
        if type(part) is ast.Slice:
            for bound in (part.lower, part.upper, part.step):  # type: ignore[attr-defined]
                if bound is not None:
                    bounds.append(bound)
        elif type(part) not in _NOT_SCALAR and _zero_dim(part, scope):
            scalars.append(part)
    if not bounds and not scalars:
        return NO_MATCH
    return _matches(node, scope, bounds, scalars)


def _zero_dim(part: ast.expr, scope: CellScope) -> bool:
    """A tensor index of no dimensions (``x[i]`` with ``i = scores.argmax()``): torch reads it with ``.item()``. Not
    a 0-dim bool one: assigned through (``gain[all_zero] = 0``), torch takes ``masked_fill_``, which reads nothing."""
    value = scope.value(part)
    return value.kind == "tensor" and value.ndim == 0 and value.dtype != "bool"


def _matches(node: ast.Subscript, scope: CellScope, bounds: list[ast.expr], scalars: list[ast.expr]) -> Iterator[Match]:
    if scope.qualified_name(node.value) is not None:
        return  # an imported name or a module's attribute: a type, no tensor
    certainties = [scope.tensor_certainty(bound) for bound in bounds]
    count = sum(1 for c in certainties if c)
    if count:
        yield Match(
            node,
            f"`{scope.snippet(node)}` slices with {count} tensor bound{'s' if count > 1 else ''}: "
            "each is copied to the CPU while the CPU waits for the GPU",
            strongest(certainties),  # (a bound that is a tensor on some paths only: possible)
        )
        return
    for scalar in scalars:
        certainty = scope.tensor_certainty(scalar)
        if certainty:
            yield Match(
                node,
                f"`{scope.snippet(node)}` indexes with the 0-dim tensor `{scope.snippet(scalar, 30)}`: torch reads "
                "it on the CPU as an integer, waiting for the GPU",
                certainty,
            )
            return


RULE = Rule.from_docstring(
    __doc__,
    code="SF503",
    name="slice-with-cuda-bounds",
    title="Slicing or indexing with a CUDA tensor read as an integer waits for the GPU",
    kind="slice_bounds",
    dependency="true",
    cuda_call="cudaMemcpyAsync (device to host) + cudaStreamSynchronize, per bound",
    fix_safety="none",
    node_types=(ast.Subscript,),
    matcher=match,
)
