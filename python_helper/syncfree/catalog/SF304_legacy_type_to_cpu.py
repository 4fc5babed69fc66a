"""## What it does
Checks for `.type(torch.LongTensor)` (or another CPU tensor class such as `torch.FloatTensor`, or its name as a
string) on a CUDA tensor.

## Why is this bad?
The legacy CPU tensor classes name a device as well as a dtype: `x.type(torch.LongTensor)` converts the dtype *and
copies the tensor to the CPU*, waiting for the GPU. Code written for the dtype often did not mean the copy.

## Example
```python
labels = labels.type(torch.LongTensor)
```

## Use instead
Pass a dtype: `.type(torch.long)`, `.long()` or `.to(torch.long)` keep the tensor where it is.
```python
labels = labels.type(torch.long)
```

## Fix safety
The rewrite to the dtype needs review: the result now stays on the GPU, so code after it that relied on a CPU tensor
(`.numpy()`, mixing with CPU tensors) must be adjusted.
"""

import ast
from collections.abc import Iterator

from syncfree.catalog import Edit, Fix, Match, Rule
from syncfree.catalog.scope import CellScope, keyword_value


def _legacy_argument(node: ast.AST, scope: CellScope) -> tuple[ast.expr, str] | None:
    method = scope.method_call(node)
    if method is None or method[1] != "type":
        return None
    argument = node.args[0] if node.args else keyword_value(node, "dtype")
    legacy = scope.legacy_tensor_class(argument)
    if legacy is None or legacy[0] != "cpu":
        return None
    return argument, legacy[1]  # type: ignore[return-value]


def match(node: ast.AST, scope: CellScope) -> Iterator[Match]:
    found = _legacy_argument(node, scope)
    if found is None:
        return
    certainty = scope.tensor_certainty(scope.method_call(node)[0], unknown=True)  # type: ignore[index]
    if certainty:
        yield Match(
            node,
            f"`{scope.snippet(node)}` also moves the tensor to the CPU (a CPU tensor class), waiting for the GPU",
            certainty,
            parts={"argument": found[0], "dtype": found[1]},
        )


def rewrite(found: Match, scope: CellScope) -> Fix | None:
    dtype = f"{scope.torch}.{found.parts['dtype']}"
    return Fix(
        f"Convert the dtype only: .type({dtype})",
        "review",
        (Edit.replace(found.parts["argument"], dtype),),
        "The result stays on the GPU; code after it that expected a CPU tensor (.numpy(), CPU-only ops) must change.",
    )


RULE = Rule.from_docstring(
    __doc__,
    code="SF304",
    name="legacy-type-to-cpu",
    title="`.type(torch.LongTensor)` copies a CUDA tensor to the CPU",
    kind="to_host",
    dependency="false",
    cuda_call="cudaMemcpyAsync (device to host) + cudaStreamSynchronize",
    fix_safety="review",
    node_types=(ast.Call,),
    matcher=match,
    calls=("type",),
    rewrite=rewrite,
)
