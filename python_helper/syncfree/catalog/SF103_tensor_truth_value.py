"""## What it does
Checks for Python asking a CUDA tensor for its truth value: `if t:`, `if loss > 0.1:`, `while err > tol:`,
`assert t`, `a if t else b`, `t and u`, `not t` and `bool(t)`.

## Why is this bad?
Python must decide which branch to run, so the comparison result is copied to the CPU and the CPU waits for the GPU
to finish every kernel queued before it. The comparison itself (`loss > 0.1`) is a GPU op; only the `if` syncs, which
makes the cost easy to miss.

## Example
```python
loss = F.mse_loss(pred, target)
if loss > 0.1:
    weight = w_high
else:
    weight = w_low
```

## Use instead
Compute both outcomes and select on the GPU with `torch.where` (or `masked_fill`, `clamp`, arithmetic with the bool
tensor). When the branch really changes which code runs (early stopping, skipping a step), the sync is a true
dependency: check it less often.
```python
loss = F.mse_loss(pred, target)
weight = torch.where(loss > 0.1, w_high, w_low)
```

## Fix safety
The rewrite to `torch.where` applies to an `if`/`else` (or `a if t else b`) that assigns one name in each branch.
It needs review: `torch.where` evaluates both branches, broadcasts them into a new tensor and promotes their dtypes,
so if a branch is a Python number, has another shape or dtype, or the name must alias the branch's tensor (it is
updated in place later), the result differs.
"""

import ast
from collections.abc import Iterator

from syncfree.catalog import NO_MATCH, Certainty, Edit, Fix, Match, Rule
from syncfree.catalog.scope import CellScope, truth_tested

_REVIEW = (
    "torch.where evaluates both branches and returns a new tensor broadcast from them: check that both branches "
    "are tensors of the result's shape and dtype, have no side effects, and that nothing relies on the name "
    "aliasing a branch's tensor."
)


def _tested(node: ast.AST) -> list[ast.expr]:
    """The expressions whose truth a statement or expression asks for."""
    if isinstance(node, (ast.If, ast.While, ast.IfExp, ast.Assert)):
        return truth_tested(node.test)
    if isinstance(node, ast.comprehension):
        return [operand for condition in node.ifs for operand in truth_tested(condition)]
    return []


def _in_tested_position(node: ast.AST, scope: CellScope) -> bool:
    """True when an `and`/`or`/`not` is itself tested by an enclosing if/while/assert/ternary/comprehension."""
    child, parent = node, scope.parent(node)
    while isinstance(parent, ast.BoolOp) or (isinstance(parent, ast.UnaryOp) and isinstance(parent.op, ast.Not)):
        child, parent = parent, scope.parent(parent)
    if isinstance(parent, (ast.If, ast.While, ast.IfExp, ast.Assert)):
        return parent.test is child
    return isinstance(parent, ast.comprehension) and child in parent.ifs


def match(node: ast.AST, scope: CellScope) -> Iterator[Match]:
    # Most nodes shown to this rule ask for no tensor's truth (`-x`, `if x is None:`): the cheap tests come first,
    # without a generator, and where a node is tested (`_in_tested_position`, which takes the statement apart to find
    # parents) is asked only once an operand is a tensor.
    kind = type(node)
    if kind is ast.If or kind is ast.While or kind is ast.IfExp or kind is ast.Assert:
        test = node.test  # type: ignore[attr-defined]
        test_kind = type(test)
        if test_kind is not ast.BoolOp and not (test_kind is ast.UnaryOp and type(test.op) is ast.Not):
            certainty = scope.tensor_certainty(test)  # a test of one operand, the most common
            return iter((_tested_match(node, test, certainty, scope),)) if certainty else NO_MATCH
        operands = truth_tested(test)
    elif kind is ast.UnaryOp:
        if type(node.op) is not ast.Not:  # type: ignore[attr-defined]
            return NO_MATCH
        certainty = scope.tensor_certainty(node.operand)  # type: ignore[attr-defined]
        if not certainty or _in_tested_position(node, scope):
            return NO_MATCH
        message = f"`{scope.snippet(node)}` asks a CUDA tensor for its truth value: the CPU waits for the GPU"
        return iter((Match(node, message, certainty),))
    elif kind is ast.BoolOp:
        # `t and u` as a value: Python tests every operand but the last.
        operands = [o for value in node.values[:-1] for o in truth_tested(value)]  # type: ignore[attr-defined]
    elif kind is ast.Call:
        if scope.call_name(node) != "builtins.bool" or len(node.args) != 1:  # type: ignore[attr-defined]
            return NO_MATCH
        certainty = scope.tensor_certainty(node.args[0])  # type: ignore[attr-defined]
        if not certainty:
            return NO_MATCH
        message = f"`{scope.snippet(node)}` copies a CUDA tensor's truth value to the CPU and waits for the GPU"
        return iter((Match(node, message, certainty),))
    else:
        operands = _tested(node)
    found = []
    for operand in operands:
        certainty = scope.tensor_certainty(operand)
        if certainty:
            found.append((operand, certainty))
    if not found or (kind is ast.BoolOp and _in_tested_position(node, scope)):
        return NO_MATCH
    return iter([_tested_match(node, operand, certainty, scope) for operand, certainty in found])


# What asks for the truth value, by the node that holds the test ("the if tests `x` on the CPU" read as if the CPU
# ran the comparison, and "the if" is no word of the language the user reads).
_WHERE = {
    ast.If: "`if`",
    ast.While: "`while`",
    ast.Assert: "`assert`",
    ast.IfExp: "`… if … else …`",
    ast.comprehension: "a comprehension's `if`",
    ast.BoolOp: "`and`/`or`",
}


def _tested_match(node: ast.AST, operand: ast.expr, certainty: Certainty, scope: CellScope) -> Match:
    return Match(
        operand,
        f"{_WHERE[type(node)]} needs the truth value of `{scope.snippet(operand)}` on the CPU: it is copied back and the "
        "CPU waits for the GPU",
        certainty,
        parts={"owner": node},
    )


def _single_assignment(block: list[ast.stmt]) -> ast.Assign | None:
    statement = block[0] if len(block) == 1 else None
    if isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(statement.targets[0], ast.Name):
        return statement
    return None


def rewrite(found: Match, scope: CellScope) -> Fix | None:
    owner = found.parts.get("owner")
    test = found.node
    if owner is None or getattr(owner, "test", None) is not test or scope.value(test).dtype != "bool":
        return None  # only a whole test that is a bool tensor maps onto torch.where
    where = f"{scope.torch}.where"
    if isinstance(owner, ast.IfExp):
        text = f"{where}({scope.text(test)}, {scope.text(owner.body)}, {scope.text(owner.orelse)})"
        return Fix("Select with torch.where", "review", (Edit.replace(owner, text),), _REVIEW)
    if not isinstance(owner, ast.If):
        return None
    then, otherwise = _single_assignment(owner.body), _single_assignment(owner.orelse)
    if then is None or otherwise is None or then.targets[0].id != otherwise.targets[0].id:  # type: ignore[attr-defined]
        return None
    name = then.targets[0].id  # type: ignore[attr-defined]
    text = f"{name} = {where}({scope.text(test)}, {scope.text(then.value)}, {scope.text(otherwise.value)})"
    edit = Edit((owner.lineno, owner.col_offset), (otherwise.end_lineno, otherwise.end_col_offset), text)  # type: ignore[arg-type]
    return Fix("Replace the if/else with torch.where", "review", (edit,), _REVIEW)


RULE = Rule.from_docstring(
    __doc__,
    code="SF103",
    name="tensor-truth-value",
    title="A Python condition on a CUDA tensor waits for the GPU",
    kind="python_bool",
    dependency="true",
    cuda_call="cudaMemcpyAsync (device to host) + cudaStreamSynchronize",
    fix_safety="review",
    node_types=(ast.If, ast.While, ast.IfExp, ast.Assert, ast.comprehension, ast.BoolOp, ast.UnaryOp, ast.Call),
    matcher=match,
    operators=(ast.Not,),  # (of its UnaryOps: `not t`; no `-x` nor `~x`)
    calls=("bool",),
    rewrite=rewrite,
)
