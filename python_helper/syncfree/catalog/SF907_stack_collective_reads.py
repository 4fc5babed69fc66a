"""## What it does
Checks for several tensors all-reduced one by one and each read on the host afterwards, such as logging a loss and
an accuracy averaged over the ranks.

## Why is this bad?
Each read is a sync that waits for its collective (and so for the slowest rank): two metrics cost two collectives
and two round trips to the host where one of each would do.

## Example
```python
dist.all_reduce(loss_sum)
dist.all_reduce(correct)
print(loss_sum.item(), correct.item())
```

## Use instead
Stack the metrics on the GPU, reduce them in one collective and read them in one transfer.
```python
stats = torch.stack([loss_sum, correct])
dist.all_reduce(stats)
loss_value, correct_value = stats.tolist()
```

## Fix safety
No automatic fix: `torch.stack` needs tensors of one shape and promotes their dtypes.
"""

import ast
from collections.abc import Iterator

from syncfree.catalog import NO_MATCH, Match, Rule
from syncfree.catalog.collectives import LOOK_BACK, collective_output, reads_of
from syncfree.catalog.scope import CellScope


def _all_reduce(statement: ast.stmt, scope: CellScope) -> str | None:
    """The name of ``dist.all_reduce(name)`` (synchronous) as a statement of its own."""
    if type(statement) is not ast.Expr:
        return None
    found = collective_output(statement.value, scope)
    return found[1] if found is not None and found[0] == "all_reduce" else None


#: All-reduces at most this many statements apart are one group.
GAP = 3


def match(node: ast.AST, scope: CellScope) -> Iterator[Match]:
    name = _all_reduce(node, scope)  # type: ignore[arg-type]
    if name is None:
        return NO_MATCH  # (most nodes this rule is shown: no generator for them)
    return _matches(node, scope, name)  # type: ignore[arg-type]


def _matches(node: ast.stmt, scope: CellScope, name: str) -> Iterator[Match]:
    block, index = scope.siblings(node)  # type: ignore[arg-type]
    if any(_all_reduce(s, scope) for s in block[max(0, index - GAP):index]):
        return  # reported from the first all-reduce of the group
    reduced: dict[str, ast.stmt] = {name: node}  # type: ignore[dict-item]
    last = index
    position = index + 1
    while position < len(block) and position - last <= GAP:
        statement = block[position]
        other = _all_reduce(statement, scope)
        if other is not None:
            reduced.setdefault(other, statement)
            last = position
        elif any(True for _ in reads_of(set(reduced), [statement], scope)):
            break  # a read before the next all-reduce: the group ends here
        position += 1
    if len(reduced) < 2:
        return
    after = block[last + 1:last + 1 + LOOK_BACK]
    read = list(dict.fromkeys(n for n, _ in reads_of(set(reduced), after, scope)))
    if len(read) < 2:
        return
    names = ", ".join(f"`{n}`" for n in read)
    yield Match(node, f"{names} are all-reduced one by one and each read on the host: {len(read)} collectives and "
                f"{len(read)} syncs where one stacked all-reduce and one read would do", "likely",
                end_node=block[last])


RULE = Rule.from_docstring(
    __doc__,
    code="SF907",
    name="stack-collective-reads",
    title="Several all-reduced metrics are each read on the host",
    kind="distributed",
    dependency="false",
    cuda_call="one cudaStreamSynchronize per read",
    fix_safety="none",
    node_types=(ast.Expr,),
    matcher=match,
)
