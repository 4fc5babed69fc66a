"""## What it does
Checks for the result of a collective read on the host soon after it: `dist.all_reduce(t)` then `t.item()`,
`t.tolist()`, `float(t)`, or `t` in an `if`/`while` condition.

## Why is this bad?
With NCCL the collective only queues work on the GPU; the read then makes the CPU wait for it, and the collective
finishes only when every rank has reached it. So each rank's CPU waits for the slowest rank, every time the line
runs (typically every step, to log a loss). The read is the sync (SF101 and its kin count it); this rule names the
collective that makes it wait for the other ranks too.

## Example
```python
reduced = loss.detach().clone()
dist.all_reduce(reduced)
mean_loss = reduced.item() / world_size
```

## Use instead
Keep the reduced value on the GPU and read it once per logging interval; accumulate on the GPU between logs. Several
metrics: stack them and reduce once (SF907).
```python
running += loss.detach()
if step % log_every == 0:
    dist.all_reduce(running)
    mean_loss = running.item() / (world_size * log_every)
    running.zero_()
```

## Fix safety
No automatic fix: how often to read is the program's choice.
"""

import ast
from collections.abc import Iterator

from syncfree.catalog import NO_MATCH, Match, Rule
from syncfree.catalog.collectives import READ_METHODS, host_read, may_call_collectives, reduced_before
from syncfree.catalog.scope import CellScope


def _names_tested(test: ast.expr) -> Iterator[ast.Name]:
    """Names a condition tests directly: ``if t:``, ``if t > 0:``, ``while not t:``."""
    if type(test) is ast.Name:
        yield test
    elif type(test) is ast.UnaryOp and isinstance(test.op, ast.Not):
        yield from _names_tested(test.operand)
    elif type(test) is ast.BoolOp:
        for value in test.values:
            yield from _names_tested(value)
    elif type(test) is ast.Compare:
        for operand in (test.left, *test.comparators):
            if type(operand) is ast.Name:
                yield operand


def match(node: ast.AST, scope: CellScope) -> Iterator[Match]:
    if not may_call_collectives(scope):
        return NO_MATCH  # (every path below needs reduced_before, which finds no collective then)
    return _matches(node, scope)


def _matches(node: ast.AST, scope: CellScope) -> Iterator[Match]:
    if type(node) is ast.Call:
        read = host_read(node, scope)
        if read is None:
            return
        for name in dict.fromkeys(scope.names_in(read)):
            collective = reduced_before(node, name, scope)
            if collective is None:
                continue
            certainty = scope.tensor_certainty(read, unknown=True)
            if certainty is None:
                return
            yield Match(node, f"`{scope.snippet(node)}` reads `{name}` on the host after "
                        f"`{scope.snippet(collective)}` (line {collective.lineno}): the CPU waits for the collective, "
                        "and so for the slowest rank", certainty)
            return
    elif type(node) in (ast.If, ast.While):
        for tested in _names_tested(node.test):  # type: ignore[attr-defined]
            collective = reduced_before(node, tested.id, scope)
            if collective is None or scope.tensor_certainty(tested, unknown=True) is None:
                continue
            yield Match(node.test, f"the condition `{scope.snippet(node.test)}` reads `{tested.id}` on the host "  # type: ignore[attr-defined]
                        f"after `{scope.snippet(collective)}` (line {collective.lineno}): the CPU waits for the "
                        "collective, and so for the slowest rank", "likely")
            return


RULE = Rule.from_docstring(
    __doc__,
    code="SF904",
    name="collective-result-read-on-host",
    title="A collective's result is read on the host",
    kind="distributed",
    dependency="true",
    cuda_call="cudaMemcpyAsync (device to host) + cudaStreamSynchronize after the collective",
    fix_safety="none",
    node_types=(ast.Call, ast.If, ast.While),
    matcher=match,
    calls=READ_METHODS | {"float", "int", "bool"},
)
