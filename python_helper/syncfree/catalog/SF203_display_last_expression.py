"""## What it does
Checks for a cell whose last line is a CUDA tensor expression, which IPython displays with `repr`.

## Why is this bad?
IPython shows the value of a cell's last expression by calling `repr` on it, which copies the tensor's values to the
CPU and waits for the GPU, several times for one tensor. Inside a `%%timeit` or a benchmark cell this also adds the
wait to what is measured.

## Example
```python
y = torch.relu(x @ w)
y.sum()
```

## Use instead
End the cell with `;` (IPython then displays nothing) or display something that lives on the CPU, such as
`y.shape`.
```python
y = torch.relu(x @ w)
y.sum();
```

## Fix safety
No automatic fix: the display may be what the author wants.
"""

import ast
from collections.abc import Iterator

from syncfree.catalog import NO_MATCH, Match, Rule
from syncfree.catalog.scope import CellScope


def _silenced(node: ast.Expr, scope: CellScope) -> bool:
    """IPython displays nothing when the cell's last line ends with `;` (IPython.core.displayhook.quiet)."""
    rest = scope.lines[node.end_lineno - 1].encode()[node.end_col_offset :].decode()  # type: ignore[operator]
    return rest.split("#", 1)[0].strip().startswith(";")


def match(node: ast.AST, scope: CellScope) -> Iterator[Match]:
    body = scope.tree.body
    if not body or body[-1] is not node or not isinstance(node, ast.Expr) or _silenced(node, scope):
        return NO_MATCH  # (most nodes this rule is shown: no generator for them)
    return _matches(node, scope)


def _matches(node: ast.Expr, scope: CellScope) -> Iterator[Match]:
    certainty = scope.tensor_certainty(node.value)
    if certainty:
        yield Match(
            node.value,
            f"IPython displays `{scope.snippet(node.value)}` with repr: the CPU copies the values and waits for the GPU",
            certainty,
        )


RULE = Rule.from_docstring(
    __doc__,
    code="SF203",
    name="display-last-expression",
    title="A CUDA tensor as the cell's last expression is displayed, which waits for the GPU",
    kind="print",
    dependency="true",
    cuda_call="cudaMemcpyAsync (device to host) + cudaStreamSynchronize, several per tensor",
    fix_safety="none",
    node_types=(ast.Expr,),
    matcher=match,
)
