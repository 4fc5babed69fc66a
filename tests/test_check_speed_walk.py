"""The static pass's walk made fast (catalog/scope.py) walks as the plain one did.

The walk goes through functions made per node type (``_walker``) and records the parents of expressions as it enters
them, those of names and constants only when a rule asks. These tests hold it to the explicit-stack walk it replaced
(``CellScope._generic_deep``, still used past ``_DEPTH`` levels and for an unhashable ``types``): the same nodes
visited in the same order, with the same values in scope, and ``parent()`` answering as the tree does.
"""

from __future__ import annotations

import ast

import pytest

from syncfree.analyze import _dispatch
from syncfree.catalog import select_rules
from syncfree.catalog.scope import CellScope, child_nodes, replace

SOURCE = '''\
import torch
import torch.nn.functional as F
from torch import nn

device = torch.device("cuda")
x = torch.randn(8, device=device)
table = {"a": 1, **{"b": 2}, None: x}
values = [v.item() for v in x if v > 0 if (w := v * 2) is not None]
pairs = {k: v for k, v in enumerate(x)}
gen = (lambda a, b=x.sum(): (lambda c: c.item() + a)(b))(x)
chain = x + x * 2 - x / 3 + F.relu(x)[0] + x[1:2].mean() + (x if x.any() else -x).sum()
text = f"{x.max()!r:>{len(values)}} {chain=}"
first, *rest = x.tolist()
a = b = x.cuda()
del first


def helper(t: torch.Tensor, scale: float = 2.0, *args, key=None, **kwargs) -> torch.Tensor:
    global table
    y = t * scale
    if y.sum() > 0 and not t.is_cuda:
        y = y.cpu()
    elif isinstance(t, torch.Tensor):
        y = t[t > 0]
    else:
        raise ValueError(f"{t}")
    for i, row in enumerate(y):
        while row.any():
            row = row - 1
    try:
        y.item()
    except* ValueError as error:
        print(error)
    finally:
        del y
    with torch.no_grad() as guard, open("f") as handle:
        z = [[q.item() for q in r] for r in t]
    match z:
        case [first, *others] if first > 0:
            print(first)
        case {"k": value, **more}:
            pass
        case torch.Tensor(shape=(n, m)) | None:
            pass
        case _:
            pass
    return helper(t.cuda(), key=lambda u: u.item())


class Net(nn.Module):
    scale: float = 1.0

    def forward(self, inputs):
        def inner(value):
            nonlocal inputs
            return value.item()
        assert inputs.sum() > 0, inputs
        self.out = inputs[0] = inner(inputs) or inputs.mean()
        return self.out


async def stream(items):
    async for item in items:
        async with item as held:
            await held
    return [item async for item in items]


helper(x)
model = Net().cuda()
model(x).item()
deep = x''' + " + x" * 150 + '''
nested = ''' + "lambda: " * 60 + '''x.item()
'''


class _Everything:
    """A container of every node type that cannot be hashed: the walk goes through its explicit stack only."""

    __hash__ = None  # type: ignore[assignment]

    def __init__(self, types: frozenset[type] | None) -> None:
        self.types = types

    def __contains__(self, kind: object) -> bool:
        return self.types is None or kind in self.types


def _walk(source: str, types: object) -> tuple[list[tuple[object, ...]], CellScope]:
    tree = ast.parse(source)
    scope = CellScope(tree, source)
    seen: list[tuple[object, ...]] = []

    def visit(node: ast.AST) -> None:
        parent = scope.parent(node)
        value = scope.value(node) if isinstance(node, ast.expr) else None
        if value is not None and isinstance(value.const, ast.AST):  # a function of the cell: its own tree's node
            value = replace(value, const=(type(value.const).__name__, value.const.lineno))
        elif value is not None and type(value.const) is tuple and hasattr(value.const[-1], "node"):
            # an object of a class of the file: (its marker, the class's info, made anew by each walk)
            value = replace(value, const=(value.const[0], value.const[1].node.name))
        seen.append((type(node).__name__, getattr(node, "lineno", None), getattr(node, "col_offset", None),
                     type(parent).__name__, value, scope.function.name if scope.function else None))

    scope.walk(visit, types=types)  # type: ignore[arg-type]
    return seen, scope


RULE_TYPES = _dispatch(select_rules(None, None), True)[2]


@pytest.mark.parametrize("types", [None, RULE_TYPES, frozenset({ast.Name, ast.Call})], ids=["all", "rules", "leaves"])
def test_generated_walk_visits_as_the_explicit_stack(types: frozenset[type] | None) -> None:
    generated, _ = _walk(SOURCE, types)
    stacked, _ = _walk(SOURCE, _Everything(types))
    assert len(generated) > 100
    assert generated == stacked


def _tree_parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    parents = {}
    for node in ast.walk(tree):
        for child in child_nodes(node):
            parents[child] = node
    return parents


def test_parent_is_the_tree_parent() -> None:
    """Every node's parent, asked during the walk or after it: names and constants, a lambda's defaults and a
    parameter's annotation included (recorded when asked, not as the walk enters them)."""
    tree = ast.parse(SOURCE)
    truth = _tree_parents(tree)
    scope = CellScope(tree, SOURCE)
    asked: list[tuple[ast.AST, ast.AST | None]] = []
    scope.walk(lambda node: asked.append((node, scope.parent(node))), types=RULE_TYPES)
    assert asked and all(parent is truth.get(node) for node, parent in asked)
    assert all(scope.parent(node) is parent for node, parent in truth.items())
    assert scope.parent(tree) is None
    assert scope.parent(ast.Name("elsewhere")) is None


def test_parent_of_a_name_inside_the_statement_being_walked() -> None:
    """A rule asking for a name's parent gets it from the statement being walked, not from the whole cell."""
    source = "import torch\nx = torch.ones(3)\ny = x[0] + x.sum()\nz = 1\n"
    tree = ast.parse(source)
    scope = CellScope(tree, source)
    found = {}

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Subscript):
            found["parent"] = scope.parent(node.value)
            found["whole cell"] = scope._all_recorded

    scope.walk(visit, types=frozenset({ast.Subscript}))
    assert isinstance(found["parent"], ast.Subscript)
    assert found["whole cell"] is False
