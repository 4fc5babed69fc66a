"""## What it does
Checks for `print(t)`, `display(t)` or `pprint(t)` of a CUDA tensor.

## Why is this bad?
Printing formats the tensor's values on the CPU, so they are copied back while the CPU waits for the GPU. Formatting
even a scalar tensor syncs several times (8 measured for `print` of a scalar: `_tensor_str` inspects the values to
choose a format), and a large tensor is summarized from several pieces.

## Example
```python
for step, (x, y) in enumerate(loader):
    loss = F.cross_entropy(model(x), y)
    print(step, loss)
```

## Use instead
Print rarely, and print Python numbers read in one transfer: every N steps, or after the loop. Print shapes and dtypes
(`t.shape`) freely: they live on the CPU.
```python
for step, (x, y) in enumerate(loader):
    loss = F.cross_entropy(model(x), y)
    if step % 100 == 0:
        print(step, loss.item())  # one sync every 100 steps
```

## Fix safety
No automatic fix: what to print and how often is the author's choice.
"""

import ast
from collections.abc import Iterator

from syncfree.catalog import Match, Rule, callee_names
from syncfree.catalog.scope import CellScope

_PRINTERS = frozenset({"builtins.print", "IPython.display.display", "pprint.pprint", "pprint.pp"})


def _is_printer(node: ast.Call, scope: CellScope) -> bool:
    name = scope.call_name(node)
    if name in _PRINTERS:
        return True
    # IPython puts display() in the user namespace without an import.
    return isinstance(node.func, ast.Name) and node.func.id == "display" and scope.value(node.func).kind == "unknown"


def match(node: ast.AST, scope: CellScope) -> Iterator[Match]:
    if not _is_printer(node, scope):
        return
    certainties = [scope.tensor_certainty(a.value if isinstance(a, ast.Starred) else a) for a in node.args]
    if "certain" in certainties or "likely" in certainties:
        yield Match(
            node,
            f"`{scope.snippet(node)}` formats a CUDA tensor: its values are copied to the CPU, which waits for the GPU",
            "certain" if "certain" in certainties else "likely",
        )


RULE = Rule.from_docstring(
    __doc__,
    code="SF201",
    name="print-tensor",
    title="Printing a CUDA tensor waits for the GPU",
    kind="print",
    dependency="true",
    cuda_call="cudaMemcpyAsync (device to host) + cudaStreamSynchronize, several per tensor",
    fix_safety="none",
    node_types=(ast.Call,),
    matcher=match,
    calls=callee_names(_PRINTERS) | {"display"},
)
