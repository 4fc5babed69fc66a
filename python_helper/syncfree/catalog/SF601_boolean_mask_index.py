"""## What it does
Checks for a CUDA tensor indexed with a boolean mask: `x[mask]`, `x[x > 0]`, `x[:, keep]`, and for assigning a
tensor through a mask (`x[mask] = y`).

## Why is this bad?
The result's size is the number of `True` elements, which only the GPU knows: torch copies the count to the CPU to
allocate the output, waiting for the GPU. Everything that follows depends on a shape that changes from call to call,
which also defeats CUDA graphs and `torch.compile`'s static shapes.

## Example
```python
scores = torch.sigmoid(logits)
total = scores[scores > 0.5].sum()
```

## Use instead
Keep the shape fixed: select with `torch.where(mask, x, 0)` or multiply by the mask and reduce, or use
`masked_fill`. Assigning a Python scalar through a mask (`x[mask] = 0`) takes torch's `masked_fill_` path and does
not sync. When the compacted tensor is really needed and its maximum size is known, `torch.nonzero_static` avoids
the sync.
```python
scores = torch.sigmoid(logits)
total = torch.where(scores > 0.5, scores, 0).sum()
```

## Fix safety
No automatic fix: the result's shape changes, so the code that uses it must change with it.
"""

import ast
from collections.abc import Iterator

from syncfree.catalog import NO_MATCH, Match, Rule
from syncfree.catalog.scope import CellScope, Value, assigned_value, number_literal


def _mask_parts(node: ast.Subscript, scope: CellScope) -> list[ast.expr]:
    masks = []
    index = node.slice
    for part in index.elts if type(index) is ast.Tuple else (index,):  # index_parts, without its list
        if type(part) in _NO_MASKS:
            continue
        value = scope.value(part)
        if (value.kind == "tensor" and value.dtype == "bool") or (_mask_shaped(part) and _callers_data(value)) \
                or _named_mask(part, value):
            masks.append(part)
    return masks


def _named_mask(part: ast.expr, value: Value) -> bool:
    """A name the text does not type that says it is a mask (``mask``, ``keep_mask``, ``self.pad_mask``): a boolean
    tensor by its name only, so at most a `possible` finding (`_matches`)."""
    name = part.id if type(part) is ast.Name else part.attr if type(part) is ast.Attribute else ""
    return value.kind == "unknown" and "mask" in name.lower()


#: Index parts that are never a mask: a number, None, an Ellipsis, a string, a slice.
_NO_MASKS = (ast.Constant, ast.Slice)


def _mask_shaped(part: ast.expr) -> bool:
    """A comparison, a negated one or a ``.bool()``: a mask, whatever data it is computed from."""
    if type(part) is ast.UnaryOp and type(part.op) is ast.Invert:
        part = part.operand
    return type(part) is ast.Compare or (
        type(part) is ast.Call and type(part.func) is ast.Attribute and part.func.attr == "bool" and not part.args)


def _callers_data(value: Value) -> bool:
    """The caller's NumPy-or-tensor data (``x: NdarrayOrTensor``, what is computed from it): a tensor on some paths."""
    return value.kind == "maybe_tensor" and value.const is not None


def _tensor_shaped(value: ast.expr) -> bool:
    """A value written the way tensors are made: arithmetic, a method's result (``embed.to(x.dtype)``), an index."""
    return isinstance(value, (ast.BinOp, ast.Subscript)) or (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute))


def match(node: ast.AST, scope: CellScope) -> Iterator[Match]:
    # Every subscript is shown to this rule and few hold a mask: those are told apart here, without the generator
    # that a finding needs.
    if type(node) is not ast.Subscript:
        return NO_MATCH
    masks = _mask_parts(node, scope)  # type: ignore[arg-type]
    if not masks:
        return NO_MATCH
    return _matches(node, masks, scope)  # type: ignore[arg-type]


def _matches(node: ast.Subscript, masks: list[ast.expr], scope: CellScope) -> Iterator[Match]:
    receiver = scope.value(node.value)
    named = [mask for mask in masks if _named_mask(mask, scope.value(mask))]
    if named and len(named) < len(masks):
        masks, named = [mask for mask in masks if mask not in named], []  # a real mask decides
    elif named and receiver.kind != "tensor":
        return  # a mask by its name only counts where the text says the indexed value is a tensor
    possible = any(_callers_data(scope.value(mask)) for mask in masks)  # at most possible (below)
    if _callers_data(receiver):
        receiver, possible = Value("tensor"), True
    elif receiver.kind not in ("tensor", "unknown"):
        return
    if all(scope.value(mask).device == "cpu" for mask in masks):
        return  # a mask on the CPU is counted there: x[mask.cpu()] does not sync (measured, sync-facts.md)
    devices = [receiver.device, *(scope.value(mask).device for mask in masks)]
    if "cuda" in devices:
        certainty = "certain"
    elif all(device == "cpu" for device in devices):
        return
    else:
        certainty = "likely"
    if isinstance(node.ctx, ast.Store) and not isinstance(scope.parent(node), ast.AugAssign):
        value = assigned_value(node, scope)
        if value is None or number_literal(value) is not None or scope.value(value).kind == "python":
            return  # x[mask] = scalar is a masked_fill_: no sync
        stored = scope.value(value)
        if stored.ndim == 0 and stored.device == "cpu":
            # x[mask] = torch.tensor(1.0): a 0-dim CPU value takes the masked_fill_ path of a number (index_put_ with
            # one bool index and a 0-dim value, aten/src/ATen/native/TensorAdvancedIndexing.cpp), read on the host
            # with no sync; a 0-dim CUDA value is read back (`x[mask] = zero_gpu` syncs, sync-facts.md).
            return
        if scope.value(value).kind != "tensor" and not _tensor_shaped(value):
            return  # x[mask] = self.fill_value: a name the text does not tell, as often a number (no sync) as not
        message = f"`{scope.snippet(node)} = ...` assigns through a boolean mask: torch counts the mask on the CPU"
        certainty = "likely"
    else:
        message = f"`{scope.snippet(node)}` has as many elements as the mask has True values: the CPU waits for that count"
    if named:
        yield Match(node, f"{message} (possible: only when `{scope.snippet(named[0])}` is a boolean tensor: its name "
                    "says a mask, the text does not say what it holds)", "possible")
        return
    yield Match(node, message, "possible" if possible and certainty == "likely" else certainty)


RULE = Rule.from_docstring(
    __doc__,
    code="SF601",
    name="boolean-mask-index",
    title="Indexing with a boolean mask waits for the number of selected elements",
    kind="mask_index",
    dependency="true",
    cuda_call="cudaMemcpyAsync (device to host) + cudaStreamSynchronize (nonzero count)",
    fix_safety="none",
    node_types=(ast.Subscript,),
    matcher=match,
)
