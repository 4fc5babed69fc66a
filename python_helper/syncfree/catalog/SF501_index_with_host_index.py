"""## What it does
Checks for a CUDA tensor indexed with an index that lives on the CPU: a list (`x[[0, 2, 5]]`), a CPU tensor
(`x[idx_cpu]`) or a NumPy array, for reading or for assignment.

## Why is this bad?
Advanced indexing runs on the GPU, so torch first copies the CPU index there with a blocking copy: the CPU waits for
the copy and for the work queued before it. Inside a loop this is one sync per iteration for an index that usually
never changes.

## Example
```python
cols = [0, 2, 5]
for batch in loader:
    feats = batch.cuda(non_blocking=True)[:, cols]
```

## Use instead
Create the index on the GPU once, outside the loop, and reuse it; a contiguous or strided run of positions is a slice,
which needs no index tensor at all.
```python
cols = torch.tensor([0, 2, 5]).to("cuda", non_blocking=True)
for batch in loader:
    feats = batch.cuda(non_blocking=True)[:, cols]
```

## Fix safety
No automatic fix: the index should move out of the loop, which a local edit cannot do.
"""

import ast
from collections.abc import Iterator

from syncfree.catalog import NO_MATCH, Match, Rule
from syncfree.catalog.scope import STRINGS, TUPLE, CellScope


def host_index(part: ast.expr, scope: CellScope) -> bool:
    """An index part that lives on the CPU and is not a basic index (int, slice, None, ...)."""
    if isinstance(part, ast.ListComp):
        return True
    value = scope.value(part)
    if value.kind == "sequence":
        # A Python list (bound to a name or written out), not a tuple (`b[tuple(slices)]`: basic indexing, one
        # part per dimension) nor a list of strings (`df[["col"]]`: a column selection, no tensor takes one).
        return value.const not in (TUPLE, STRINGS)
    # A CPU bool mask is no copy to wait for: torch counts it on the CPU (x[mask.cpu()] measured without a sync).
    # Nor is a 0-dim CPU tensor (`for i in torch.arange(n): x[i]`, `x[torch.tensor(3)]`): torch reads it on the CPU
    # with `.item()` and selects, as for a Python int (ATen/TensorIndexing.h, handleDimInMultiDimIndexing ->
    # applySelect; a 0-dim bool one adds a dimension). Of unknown dimensions it is taken for an index tensor.
    return value.kind == "numpy" or (
        value.kind == "tensor" and value.device == "cpu" and value.dtype != "bool" and value.ndim != 0)


#: Index parts that are never a host index: a number, None, an Ellipsis, a string, a slice (its bounds are SF503's).
_BASIC_PARTS = (ast.Constant, ast.Slice)


def match(node: ast.AST, scope: CellScope) -> Iterator[Match]:
    # Every subscript is shown to this rule and few index with host data (x[0], x[:, 1:]): those are told apart
    # here, without the generator that a finding needs.
    if type(node) is not ast.Subscript:
        return NO_MATCH
    index = node.slice  # type: ignore[attr-defined]
    if type(index) is ast.Constant:
        return NO_MATCH  # x[0], x["key"]
    hosts = [part for part in (index.elts if type(index) is ast.Tuple else (index,))  # index_parts, as a tuple
             if type(part) not in _BASIC_PARTS and host_index(part, scope)]
    if not hosts:
        return NO_MATCH
    return _matches(node, hosts, scope)  # type: ignore[arg-type]


def _matches(node: ast.Subscript, hosts: list[ast.expr], scope: CellScope) -> Iterator[Match]:
    if scope.qualified_name(node.value) is not None:
        return  # an imported name or a module's attribute: a type (Callable[[Iterable], T], dict[str, int]), no tensor
    receiver = scope.value(node.value)
    if receiver.kind == "tensor":
        certainty = "certain" if receiver.device == "cuda" else "likely" if receiver.device is None else None
    else:
        # A list index on an unknown value: only arrays and tensors accept one, so report it as likely.
        # (A list bound to a name is as often a DataFrame's columns or a dict's keys: not reported.)
        certainty = "likely" if receiver.kind == "unknown" and any(isinstance(h, ast.List) for h in hosts) else None
        if receiver.kind == "maybe_tensor" and receiver.const is not None:
            certainty = "possible"  # the caller's NumPy-or-tensor data (x: NdarrayOrTensor): a tensor on some paths
    if certainty:
        yield Match(
            node,
            f"`{scope.snippet(node)}` indexes with `{scope.snippet(hosts[0], 30)}` from the CPU: torch copies it to the GPU and waits",
            certainty,
        )


RULE = Rule.from_docstring(
    __doc__,
    code="SF501",
    name="index-with-host-index",
    title="Indexing a CUDA tensor with a CPU index waits for the copy",
    kind="index",
    dependency="false",
    cuda_call="cudaMemcpyAsync (host to device) + cudaStreamSynchronize",
    fix_safety="none",
    node_types=(ast.Subscript,),
    matcher=match,
)
