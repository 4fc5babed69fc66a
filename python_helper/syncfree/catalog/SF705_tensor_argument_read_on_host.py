"""## What it does
Checks for `narrow` given a tensor `start` (for `torch.linspace`/`torch.logspace` with tensor ends, measured the
same way, see SF102).

## Why is this bad?
A size or a position must be known on the CPU to launch the kernel and to size the output, so the op reads the
0-d tensor with `.item()`: the CPU waits for the GPU. Measured on an H100 with torch 2.11 (OpInfo sweep):
`narrow(x, d, t, n)` 1 sync, `linspace(t0, t1, n)` 1 per tensor end. The value is needed on the CPU (a true
dependency) only when it is computed on the GPU; often it started as a Python number.

## Example
```python
start = torch.tensor(3, device="cuda")
y = x.narrow(0, start, 4)
grid = torch.linspace(lo_t, hi_t, 100, device="cuda")
```

## Use instead
Keep sizes and positions as Python numbers (they cost nothing to pass). If the value really comes from the GPU,
read it once, where you choose, and reuse it; or express the selection on the GPU (`index_select` with a GPU index
tensor, `lo_t + (hi_t - lo_t) * torch.linspace(0, 1, 100, device="cuda")`).
```python
y = x.narrow(0, 3, 4)
grid = lo_t + (hi_t - lo_t) * torch.linspace(0, 1, 100, device="cuda")
```

## Fix safety
No automatic fix: where the number comes from is the author's choice.
"""

import ast
from collections.abc import Iterator

from syncfree.catalog import Match, Rule
from syncfree.catalog.scope import CellScope, keyword_value


def _tensor(scope: CellScope, node: ast.AST | None) -> str | None:
    if node is None or isinstance(node, ast.Starred):
        return None
    value = scope.value(node)
    if value.kind == "tensor":
        return "certain" if value.device == "cuda" else "likely" if value.device is None else None
    return None


def match(node: ast.AST, scope: CellScope) -> Iterator[Match]:
    if not isinstance(node, ast.Call):
        return
    name = scope.call_name(node)
    bounds: list[ast.AST | None] = []
    # torch.linspace/logspace with tensor ends: SF102 (python-scalar) reports them already.
    if name == "torch.narrow":
        bounds = [node.args[2] if len(node.args) > 2 else keyword_value(node, "start")]
    else:
        method = scope.method_call(node)
        if method is None or method[1] != "narrow" or scope.tensor_certainty(method[0], unknown=True) is None:
            return
        bounds = [node.args[1] if len(node.args) > 1 else keyword_value(node, "start")]
    certainties = [c for c in (_tensor(scope, b) for b in bounds) if c]
    if certainties:
        yield Match(node, f"`{scope.snippet(node)}` takes a tensor where it needs a number: it reads it with "
                          f".item(), waiting for the GPU", "certain" if "certain" in certainties else "likely")


RULE = Rule.from_docstring(
    __doc__,
    code="SF705",
    name="tensor-argument-read-on-host",
    title="A tensor passed where a number is needed is read on the CPU",
    kind="python_scalar",
    dependency="false",
    cuda_call="cudaMemcpyAsync (device to host) + cudaStreamSynchronize",
    fix_safety="none",
    node_types=(ast.Call,),
    matcher=match,
    calls=("narrow",),
)
