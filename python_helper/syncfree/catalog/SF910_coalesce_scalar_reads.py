"""## What it does
Checks for several `.item()` reads on adjacent lines, such as logging a few metrics at the end of a step.

## Why is this bad?
Each `.item()` is a separate sync: the CPU waits for the GPU, copies one number, then queues the next tiny copy and
waits again. Three reads cost three round trips (measured: 3 syncs) where one transfer of the three values would do.

## Example
```python
l1 = x.sum().item()
l2 = x.mean().item()
l3 = x.max().item()
```

## Use instead
Stack the scalars on the GPU and read them in one transfer.
```python
l1, l2, l3 = torch.stack([x.sum(), x.mean(), x.max()]).tolist()
```

## Fix safety
The rewrite needs review: `torch.stack` needs tensors of one shape on one device and promotes their dtypes, so an
integer count stacked with float losses comes back as a float (`3.0`, not `3`).
"""

import ast
from collections.abc import Iterator

from syncfree.catalog import Edit, Fix, Match, Rule
from syncfree.catalog.scope import CellScope


def _scalar_read(statement: ast.stmt, scope: CellScope) -> tuple[str, ast.expr] | None:
    """``(name, tensor)`` for ``name = tensor.item()``."""
    if not (isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(statement.targets[0], ast.Name)):
        return None
    method = scope.method_call(statement.value)
    if method is None or method[1] != "item" or statement.value.args or statement.value.keywords:  # type: ignore[attr-defined]
        return None
    if scope.tensor_certainty(method[0], unknown=True) is None:
        return None
    return statement.targets[0].id, method[0]


def _uses(node: ast.AST, names: set[str]) -> bool:
    return any(isinstance(n, ast.Name) and n.id in names for n in ast.walk(node))


def _run(block: list[ast.stmt], start: int, scope: CellScope) -> list[tuple[ast.stmt, str, ast.expr]]:
    """The adjacent, independent scalar reads starting at ``block[start]``."""
    run: list[tuple[ast.stmt, str, ast.expr]] = []
    for statement in block[start:]:
        read = _scalar_read(statement, scope)
        if read is None:
            break
        if run:
            previous = run[-1][0]
            bound = {name for _, name, _ in run}
            if statement.lineno != previous.end_lineno + 1 or read[0] in bound or _uses(read[1], bound):  # type: ignore[operator]
                break
        run.append((statement, *read))
    return run


def match(node: ast.AST, scope: CellScope) -> Iterator[Match]:
    if not isinstance(node, ast.Assign):
        return
    block, index = scope.siblings(node)
    if index > 0 and len(_run(block, index - 1, scope)) > 1:
        return  # not the first read of its run
    run = _run(block, index, scope)
    if len(run) < 2:
        return
    certainty = "certain" if all(scope.tensor_certainty(t, unknown=True) == "certain" for _, _, t in run) else "likely"
    names = ", ".join(name for _, name, _ in run)
    yield Match(
        node,
        f"{len(run)} `.item()` reads in a row ({names}): {len(run)} syncs where one transfer would do",
        certainty,
        end_node=run[-1][0],
        parts={"run": run},
    )


def rewrite(found: Match, scope: CellScope) -> Fix | None:
    run = found.parts["run"]
    names = ", ".join(name for _, name, _ in run)
    tensors = ", ".join(scope.text(tensor) for _, _, tensor in run)
    text = f"{names} = {scope.torch}.stack([{tensors}]).tolist()"
    first, last = run[0][0], run[-1][0]
    return Fix(
        "Read the scalars in one transfer",
        "review",
        (Edit((first.lineno, first.col_offset), (last.end_lineno, last.end_col_offset), text),),
        "torch.stack needs tensors of one shape on one device and promotes dtypes: an integer stacked with floats "
        "comes back as a float.",
    )


RULE = Rule.from_docstring(
    __doc__,
    code="SF910",
    name="coalesce-scalar-reads",
    title="Several `.item()` reads in a row: one sync each",
    kind="item",
    dependency="false",
    cuda_call="cudaMemcpyAsync (device to host) + cudaStreamSynchronize, per read",
    fix_safety="review",
    node_types=(ast.Assign,),
    matcher=match,
    rewrite=rewrite,
)
