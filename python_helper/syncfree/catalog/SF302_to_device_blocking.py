"""## What it does
Checks for a blocking copy of a CPU tensor to the GPU: `.cuda()`, `.to("cuda")`, `.to(device)` without
`non_blocking=True`.

## Why is this bad?
A copy to the GPU without `non_blocking=True` returns only when the data has arrived, so the CPU waits for the copy
and for the work queued before it on the stream (`cudaMemcpyAsync` + `cudaStreamSynchronize`). In a data loading
loop this serializes loading, copying and computing.

## Example
```python
for x, y in loader:
    x, y = x.cuda(), y.cuda()
```

## Use instead
Pass `non_blocking=True`, and pin the source (`DataLoader(..., pin_memory=True)` or `.pin_memory()`) so that the
copy is really asynchronous: from pageable memory the driver still stages the data through a pinned buffer and
returns only after that. GPU kernels that use the result are ordered after the copy on the same stream, so no
further synchronization is needed.
```python
loader = DataLoader(dataset, batch_size=64, pin_memory=True)
for x, y in loader:
    x, y = x.cuda(non_blocking=True), y.cuda(non_blocking=True)
```

## Fix safety
The rewrite adds `non_blocking=True` and needs review: the copy overlaps only from pinned memory, and if the code
overwrites a pinned source right after (reusing a buffer), the copy may read the new values.
"""

import ast
from collections.abc import Iterator

from syncfree.catalog import Edit, Fix, Match, Rule
from syncfree.catalog.scope import CellScope, is_constant, keyword, keyword_value


def copy_to_cuda(node: ast.AST, scope: CellScope) -> tuple[ast.expr, str] | None:
    """``(receiver, certainty)`` when ``node`` is a blocking ``.cuda()``/``.to(cuda)`` that copies from the CPU.

    The code must show one end of the copy: a source the text makes on the CPU (``torch.from_numpy(a).to(device)``,
    ``torch.arange(n).to(x.device)``), or a target it puts on CUDA (``.cuda()``, ``.to("cuda")``, a ``device`` set to
    CUDA). A device-agnostic move (``labels.to(logits.device)``, ``t.to(device)`` for a parameter ``device``) of a
    tensor from nowhere in sight is no finding: on a GPU both are mostly there already, and the move is a no-op (or
    a copy between GPUs, which does not wait for the CPU).
    """
    method = scope.method_call(node)
    if method is None or method[1] not in ("cuda", "to"):
        return None
    receiver, name = method
    if is_constant(keyword_value(node, "non_blocking"), True):
        return None
    if name == "to":
        target = scope.to_target(node)
        if target is None or target[1] == "cpu" or any(is_constant(a, True) for a in node.args[1:]):
            return None  # no device, a CPU target, or non_blocking passed positionally
        target_certain = target[1] == "cuda"
    else:
        target = None
        if node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, bool):
            return None  # .cuda(True) is non_blocking positionally in old code
        target_certain = True
    source = scope.value(receiver)
    if source.device == "cuda" or source.kind not in ("tensor", "unknown", "module"):
        return None  # already on the GPU (a no-op), or NumPy/Python data that has no .cuda()
    source_on_host = source.kind in ("tensor", "module") and source.device == "cpu"
    if not source_on_host and not target_certain:
        return None  # neither end in sight: a device-agnostic move
    certainty = "certain" if target_certain and source_on_host else "likely"
    if name == "to" and target is not None and scope.is_callers_device(target[0]):
        certainty = "possible"  # t.to(x.device) for x: NdarrayOrTensor: a copy to the GPU only for a CUDA x
    return receiver, certainty


def match(node: ast.AST, scope: CellScope) -> Iterator[Match]:
    found = copy_to_cuda(node, scope)
    if found is None or scope.looks_like_module(found[0]):
        return
    receiver, certainty = found
    pinned = scope.value(receiver).pinned
    yield Match(
        node,
        f"`{scope.snippet(node)}` copies to the GPU and waits until the copy is done"
        + (" (the source is pinned: non_blocking=True makes it asynchronous)" if pinned else ""),
        certainty,  # type: ignore[arg-type]
    )


def rewrite(found: Match, scope: CellScope) -> Fix | None:
    call = found.node
    flag = keyword(call, "non_blocking")
    if flag is not None:
        edit = Edit.replace(flag.value, "True")
    else:
        edit = scope.append_keyword(call, "non_blocking=True")
    return Fix(
        "Copy with non_blocking=True",
        "review",
        (edit,),
        "The copy only overlaps with CPU work when the source is in pinned memory; if the code overwrites a pinned "
        "source buffer right after, the copy may read the new values.",
    )


RULE = Rule.from_docstring(
    __doc__,
    code="SF302",
    name="blocking-copy-to-device",
    title="A copy to the GPU without non_blocking=True waits for it",
    kind="to_device",
    dependency="false",
    cuda_call="cudaMemcpyAsync (host to device) + cudaStreamSynchronize",
    fix_safety="review",
    node_types=(ast.Call,),
    matcher=match,
    calls=("cuda", "to"),
    rewrite=rewrite,
)
