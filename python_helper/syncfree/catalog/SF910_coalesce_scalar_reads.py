"""## What it does
Checks for several `.item()` reads on adjacent lines, such as logging a few metrics at the end of a step (a row of
more than 32 is reported in parts of 32).

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

from syncfree.catalog import NO_MATCH, Edit, Fix, Match, Rule
from syncfree.catalog.scope import CellScope


def _looks_like_read(statement: ast.AST) -> bool:
    """``name = <expression>.item()``, by its shape alone (most statements stop here)."""
    if type(statement) is not ast.Assign or len(statement.targets) != 1 or type(statement.targets[0]) is not ast.Name:
        return False
    call = statement.value
    return (
        type(call) is ast.Call
        and type(call.func) is ast.Attribute
        and call.func.attr == "item"
        and not call.args
        and not call.keywords
    )


def _scalar_read(statement: ast.stmt, scope: CellScope) -> tuple[str, ast.expr] | None:
    """``(name, tensor)`` for ``name = tensor.item()``."""
    if not _looks_like_read(statement):
        return None
    method = scope.method_call(statement.value)  # None for a module path: torch.item()
    if method is None or scope.tensor_certainty(method[0], unknown=True) is None:
        return None
    return statement.targets[0].id, method[0]  # type: ignore[attr-defined]


Read = tuple[ast.stmt, str, ast.expr]


#: Reads per run at most: a longer row is reported (and rewritten) in parts of this many, and the walk never looks
#: further ahead than this from a statement.
MAX_RUN = 32


def _run(block: list[ast.stmt], start: int, scope: CellScope) -> list[Read]:
    """The adjacent, independent scalar reads starting at ``block[start]`` (at most `MAX_RUN`)."""
    run: list[Read] = []
    bound: set[str] = set()
    # Not block[start:]: a copy of the rest of the block per call.
    for position in range(start, min(len(block), start + MAX_RUN)):
        statement = block[position]
        read = _scalar_read(statement, scope)
        if read is None:
            break
        if run:
            previous = run[-1][0]
            if (
                statement.lineno != previous.end_lineno + 1  # type: ignore[operator]
                or read[0] in bound
                or not bound.isdisjoint(scope.names_in(read[1]))
            ):
                break
        run.append((statement, *read))
        bound.add(read[0])
    return run


def _block_of(node: ast.stmt, scope: CellScope) -> tuple[list[ast.stmt], int]:
    """The statement list holding ``node``, found without scanning the list (what ``scope.siblings`` does)."""
    parent = scope.parent(node) or scope.tree
    for field_name in ("body", "orelse", "finalbody", "handlers"):
        block = getattr(parent, field_name, None)
        if isinstance(block, list) and block:
            index = _index(block, node, scope)
            if index is not None:
                return block, index
    return [node], 0


def _index(block: list[ast.stmt], node: ast.stmt, scope: CellScope) -> int | None:
    # Each statement list's positions by statement id (``list.index`` per statement is quadratic).
    positions = scope.memo.setdefault("SF910 positions", {})
    where = positions.get(id(block))
    if where is None:
        where = positions[id(block)] = {id(statement): index for index, statement in enumerate(block)}
    return where.get(id(node))


def match(node: ast.AST, scope: CellScope) -> Iterator[Match]:
    # Shown the calls of `.item` (Rule.calls: the walk records a call's parent as it enters it), not every assignment
    # of a file: the statement `name = t.item()` whose value the call is.
    if type(node) is not ast.Call:
        return NO_MATCH
    statement = scope.parent(node)
    if type(statement) is not ast.Assign or statement.value is not node or not _looks_like_read(statement):  # type: ignore[attr-defined]
        return NO_MATCH
    return _matches(statement, scope)  # type: ignore[arg-type]


def _matches(node: ast.Assign, scope: CellScope) -> Iterator[Match]:
    # The statements already taken into a run. A run is computed once, when the walk reaches its first statement
    # (what the scope knows then is what the reads are judged by), so a file of thousands of consecutive reads
    # stays linear: every later read of the run is a set lookup.
    taken = scope.memo.setdefault("SF910 taken", set())
    if id(node) in taken:
        return  # a later read of a run already reported
    block, index = _block_of(node, scope)  # type: ignore[arg-type]
    run = _run(block, index, scope)
    taken.update(id(statement) for statement, _, _ in run)
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
    node_types=(ast.Call,),
    matcher=match,
    rewrite=rewrite,
    calls=("item",),
)
