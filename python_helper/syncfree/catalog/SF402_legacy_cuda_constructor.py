"""## What it does
Checks for the legacy CUDA tensor classes called with data: `torch.cuda.BoolTensor([True, False])`,
`torch.cuda.FloatTensor(values)`.

## Why is this bad?
The data is copied from the CPU with a blocking copy, so the CPU waits for the GPU (`cudaMemcpyAsync` +
`cudaStreamSynchronize`). The legacy constructors are also deprecated and ambiguous (an int argument is a size,
a list is data).

## Example
```python
keep = torch.cuda.BoolTensor([True, False, True])
```

## Use instead
Build the tensor on the CPU with an explicit dtype and copy it with `non_blocking=True`, or fill it on the GPU with
a factory when the values are constant.
```python
keep = torch.tensor([True, False, True], dtype=torch.bool).to("cuda", non_blocking=True)
```

## Fix safety
Safe for literal lists and tuples: the dtype is the one the class names (`FloatTensor` is `torch.float32` whatever the
default dtype) and the CPU tensor is a fresh temporary, so nothing can overwrite it during the copy.
"""

import ast
from collections.abc import Iterator

from syncfree.catalog import Edit, Fix, Match, Rule
from syncfree.catalog.scope import LEGACY_TENSOR_DTYPES, CellScope, number_literal


def match(node: ast.AST, scope: CellScope) -> Iterator[Match]:
    legacy = scope.legacy_tensor_class(node.func) if isinstance(node, ast.Call) else None
    if legacy is None or legacy[0] != "cuda" or len(node.args) != 1 or node.keywords:
        return
    data = node.args[0]
    if isinstance(number_literal(data), int) or scope.value(data).kind in ("python", "tensor"):
        return  # a size (torch.cuda.FloatTensor(3) allocates), or a tensor
    certainty = "certain" if isinstance(data, (ast.List, ast.Tuple, ast.ListComp)) or scope.value(data).kind in ("numpy", "sequence") else "likely"
    yield Match(
        node,
        f"`{scope.snippet(node)}` copies its data from the CPU to the GPU and waits for the copy",
        certainty,
        parts={"dtype": legacy[1]},
    )


def rewrite(found: Match, scope: CellScope) -> Fix | None:
    call: ast.Call = found.node  # type: ignore[assignment]
    if not isinstance(call.args[0], (ast.List, ast.Tuple)):
        return None
    torch = scope.torch
    text = f"{torch}.tensor({scope.text(call.args[0])}, dtype={torch}.{found.parts['dtype']}).to(\"cuda\", non_blocking=True)"
    return Fix("Build on the CPU, copy with non_blocking=True", "safe", (Edit.replace(call, text),))


RULE = Rule.from_docstring(
    __doc__,
    code="SF402",
    name="legacy-cuda-constructor",
    title="`torch.cuda.XTensor(data)` waits for the copy",
    kind="tensor_from_python",
    dependency="false",
    cuda_call="cudaMemcpyAsync (host to device) + cudaStreamSynchronize",
    fix_safety="safe",
    node_types=(ast.Call,),
    matcher=match,
    calls=LEGACY_TENSOR_DTYPES,
    rewrite=rewrite,
)
