"""## What it does
Checks for a Python number assigned into a CUDA tensor at a single element (`x[0, 0] = 0` on a 2-D tensor) or
through an integer index tensor (`x[idx] = 0`).

## Why is this bad?
torch wraps the Python number in a CPU scalar tensor. For one element (a 0-dim destination) it copies that scalar to
the GPU, and `index_put_` does the same for a tensor index: a blocking copy, so the CPU waits for the GPU (measured:
one sync for `x[0, 0] = 0` and for `x[idx_gpu] = 0`). A destination that keeps a dimension (`x[:, j] = 1.0`,
`x[0] = 0` on a 2-D tensor) is filled from the CPU scalar without a sync, as is `x[mask] = 0` (`masked_fill_`).
In a loop that writes one element at a time this serializes the CPU and the GPU.

## Example
```python
grid = torch.ones(n, n, device="cuda")
for i in range(n):
    grid[i, 0] = 0
```

## Use instead
Write whole slices at once (`grid[:, 0] = 0` fills from the CPU scalar without a copy), assign a value that is
already on the GPU (a 0-dim tensor made by `torch.zeros`/`torch.full`, no copy involved), or use in-place ops that
take the Python scalar (`masked_fill_`, `index_fill_`).
```python
grid = torch.ones(n, n, device="cuda")
grid[:, 0] = 0  # one fill of the column: no copy, no sync
```

## Fix safety
Safe when the index holds only integers and integer tensors: the value becomes
`torch.full((), v, dtype=x.dtype, device=x.device)` (`zeros`/`ones` for 0 and 1), which stores the same number
without a copy from the CPU. Needs review when the index is a tensor of unknown dtype: with a boolean mask the
original takes torch's `masked_fill_` path, which does not sync, while a GPU value would.
"""

import ast
from collections.abc import Iterator

from syncfree.catalog import NO_MATCH, Edit, Fix, Match, Rule
from syncfree.catalog.scope import CellScope, index_parts, is_side_effect_free, number_literal
from syncfree.catalog.SF501_index_with_host_index import host_index


def _index_kind(part: ast.expr, scope: CellScope) -> str | None:
    """'int' (a Python int), 'view' (a slice, None or ...: the destination keeps a dimension), 'tensor' (an integer
    tensor), 'unknown' (a tensor of unknown dtype, or a value the text does not tell) or None (a boolean mask or a
    CPU index: other rules, and a mask with a scalar value takes masked_fill_, which does not sync)."""
    if isinstance(part, ast.Slice) or (isinstance(part, ast.Constant) and part.value in (None, Ellipsis)):
        return "view"
    if isinstance(number_literal(part), int) and not isinstance(number_literal(part), bool):
        return "int"
    value = scope.value(part)
    if value.kind == "python":
        return "int"
    if value.kind == "tensor" and value.ndim == 0:
        # A 0-dim tensor is read with `.item()` (SF501's host_index; on CUDA that read is SF503's sync): an integer
        # one selects as an int does. Of another or unknown dtype on the CPU, no finding, as for the CPU index
        # tensors host_index tells; on the GPU an integer is what a 0-dim index usually is (argmax, a count).
        if value.device == "cpu":
            return "int" if value.dtype == "int" else None
        return "int" if value.dtype in ("int", None) else None
    if host_index(part, scope):
        return None
    if value.kind == "tensor":
        return {"int": "tensor", "bool": None}.get(value.dtype or "", "unknown")
    if value.kind == "unknown" and _named_mask(part):
        return None  # `scores[done_mask] = 0`: named a mask, it takes masked_fill_ (no sync)
    return "unknown" if value.kind == "unknown" else None


def _named_mask(part: ast.expr) -> bool:
    """A name or attribute called a mask (``mask``, ``self.pad_mask``, ``beam_indices_mask``)."""
    name = part.id if isinstance(part, ast.Name) else part.attr if isinstance(part, ast.Attribute) else ""
    return name.lower().endswith("mask")


def match(node: ast.AST, scope: CellScope) -> Iterator[Match]:
    parent = scope.parent(node)
    if not isinstance(node, ast.Subscript) or not isinstance(parent, ast.Assign) or parent.targets != [node]:
        return NO_MATCH  # (most nodes this rule is shown: no generator for them)
    return _matches(node, scope, parent)


def _matches(node: ast.Subscript, scope: CellScope, parent: ast.Assign) -> Iterator[Match]:
    receiver = scope.value(node.value)  # (before the value: most receivers are no tensor the text places)
    if receiver.kind != "tensor" or receiver.device == "cpu":
        return
    value_node = parent.value
    if number_literal(value_node) is None and scope.value(value_node).kind != "python":
        return  # a tensor value (no copy from the host) or something the text does not tell
    kinds = [_index_kind(part, scope) for part in index_parts(node)]
    if None in kinds:
        return
    if "tensor" in kinds or "unknown" in kinds:
        # Advanced indexing: index_put_ copies the CPU scalar to the GPU (measured for x[idx_gpu] = 0).
        certain = "unknown" not in kinds
    elif "view" in kinds:
        return  # the destination keeps a dimension: torch fills it from the CPU scalar, no copy (measured)
    elif receiver.ndim is not None and receiver.ndim != len(kinds):
        return  # fewer ints than dimensions: a view again, filled without a copy
    else:
        # One element: a 0-dim destination takes a copy_ from the CPU scalar (torch/csrc/autograd/
        # python_variable_indexing.cpp -> at::indexing copy_to), a blocking copy (measured for x[0, 0] = 0).
        certain = receiver.ndim is not None
    certainty = "certain" if receiver.device == "cuda" and certain else "likely"
    yield Match(
        node,
        f"`{scope.snippet(parent)}` copies the Python number to the GPU with a blocking copy",
        certainty,
        parts={"value": value_node, "uncertain_index": "unknown" in kinds},
    )


def rewrite(found: Match, scope: CellScope) -> Fix | None:
    target: ast.Subscript = found.node  # type: ignore[assignment]
    if not is_side_effect_free(target.value):
        return None  # x.dtype/x.device repeat the receiver: only for a name or attribute chain
    tensor = scope.text(target.value)
    value_node = found.parts["value"]
    number = number_literal(value_node)
    if number is None and not isinstance(scope.value(value_node).const, (int, float)):
        return None  # a Python list or a number the text does not show: no 0-dim equivalent
    torch = scope.torch
    placement = f"dtype={tensor}.dtype, device={tensor}.device"
    if number is not None and number == 0:
        text = f"{torch}.zeros((), {placement})"
    elif number is not None and number == 1:
        text = f"{torch}.ones((), {placement})"
    else:
        text = f"{torch}.full((), {scope.text(value_node)}, {placement})"
    review = found.parts["uncertain_index"]
    return Fix(
        "Assign a GPU scalar instead of a Python number",
        "review" if review else "safe",
        (Edit.replace(value_node, text),),
        "If the index is a boolean mask, the original took torch's masked_fill_ path (no sync) and a GPU value "
        "makes it sync: keep the Python number then." if review else None,
    )


RULE = Rule.from_docstring(
    __doc__,
    code="SF502",
    name="index-put-python-scalar",
    title="Assigning a Python number into a CUDA tensor through an index waits for the copy",
    kind="index_put",
    dependency="false",
    cuda_call="cudaMemcpyAsync (host to device) + cudaStreamSynchronize",
    fix_safety="safe",
    node_types=(ast.Subscript,),
    matcher=match,
    rewrite=rewrite,
)
