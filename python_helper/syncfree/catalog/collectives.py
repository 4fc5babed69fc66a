"""What the distributed rules (SF904, SF907) share: which call is a collective and which
name it writes, host reads of a name, and looking back in a block for the collective that
last wrote a name."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from syncfree.catalog.scope import CellScope, child_nodes, is_constant, keyword_value, statements

#: Collectives that write their result into a tensor the caller passes: (keyword, position).
OUTPUT_ARGUMENT = {
    "torch.distributed." + name: argument
    for name, argument in {
        "all_reduce": ("tensor", 0), "reduce": ("tensor", 0), "broadcast": ("tensor", 0),
        "all_gather_into_tensor": ("output_tensor", 0), "reduce_scatter_tensor": ("output", 0),
        "all_gather": ("tensor_list", 0),
    }.items()
}
#: The last names of OUTPUT_ARGUMENT's collectives.
_COLLECTIVE_NAMES = frozenset(name.rpartition(".")[2] for name in OUTPUT_ARGUMENT)
#: Host reads of a tensor: methods, and builtins that take it as their one argument.
READ_METHODS = frozenset({"item", "tolist"})
READ_BUILTINS = frozenset({"builtins.float", "builtins.int", "builtins.bool"})
#: How far back in a block a read looks for the collective that wrote its tensor.
LOOK_BACK = 16


def collective_output(call: ast.AST, scope: CellScope, *, asynchronous: bool = False) -> tuple[str, str] | None:
    """``(collective, name)`` for a synchronous ``dist.all_reduce(name)`` and the like; with
    ``asynchronous``, also for ``async_op=True`` (whose result a read waits for after
    ``wait()``)."""
    if type(call) is not ast.Call:
        return None
    func = call.func
    if type(func) is ast.Attribute and func.attr not in _COLLECTIVE_NAMES:  # type: ignore[attr-defined]
        return None  # (`x.attr(...)`'s qualified name ends with `attr`, known without resolving it)
    collective = scope.call_name(call)
    argument = OUTPUT_ARGUMENT.get(collective or "")
    if argument is None or (not asynchronous and is_constant(keyword_value(call, "async_op"), True)):
        return None
    keyword, position = argument
    target = keyword_value(call, keyword)
    if target is None and len(call.args) > position:
        target = call.args[position]
    if type(target) is not ast.Name:
        return None
    return collective.rpartition(".")[2], target.id  # type: ignore[union-attr]


def host_read(call: ast.AST, scope: CellScope) -> ast.expr | None:
    """The tensor expression ``call`` reads on the host: ``x`` of ``x.item()``,
    ``x.tolist()``, ``float(x)``, ``int(x)``, ``bool(x)``."""
    if type(call) is not ast.Call:
        return None
    method = scope.method_call(call)
    if method is not None:
        return method[0] if method[1] in READ_METHODS and not call.args else None
    if scope.call_name(call) in READ_BUILTINS and len(call.args) == 1 and not call.keywords:
        return call.args[0]
    return None


def statement_of(node: ast.AST, scope: CellScope) -> ast.stmt | None:
    while node is not None and not isinstance(node, ast.stmt):
        node = scope.parent(node)
    return node


def _writes(statement: ast.stmt, name: str) -> bool:
    targets: list[ast.expr] = []
    if isinstance(statement, ast.Assign):
        targets = statement.targets
    elif isinstance(statement, (ast.AugAssign, ast.AnnAssign)):
        targets = [statement.target]
    elif isinstance(statement, (ast.For, ast.AsyncFor)):
        targets = [statement.target]
    for target in targets:
        if type(target) is ast.Name:  # the usual target, without ast.walk's generator
            if target.id == name:
                return True
        elif name in _names_under(target):
            return True
    return False


def _names_under(node: ast.AST) -> list[str]:
    """The ids of the ``Name`` nodes in ``node`` (what ``ast.walk`` finds, without its generator and deque: the look
    back asks this of each target like `self.x` it passes)."""
    found = []
    stack = [node]
    while stack:
        item = stack.pop()
        if type(item) is ast.Name:
            found.append(item.id)  # type: ignore[attr-defined]
        else:
            stack.extend(child_nodes(item))
    return found


#: What the name of every collective of OUTPUT_ARGUMENT holds (all_reduce, reduce, reduce_scatter_tensor;
#: all_gather, all_gather_into_tensor; broadcast).
_COLLECTIVE_TEXT = ("reduce", "all_gather", "broadcast")


def _names_a_collective(source: str) -> bool:
    """Whether the text holds the name of a collective of OUTPUT_ARGUMENT as a name of its own (a call or an import
    names one so), not as a part of one (`dist_reduce_fx`, `broadcast_to`, `all_gather_object`): each occurrence of
    _COLLECTIVE_TEXT is widened to the whole name around it (str.find and a look at its ends: a regular expression
    that tests a word boundary at every position took ten times as long)."""
    for text in _COLLECTIVE_TEXT:
        at = source.find(text)
        while at >= 0:
            start, end = at, at + len(text)
            while start and (source[start - 1].isalnum() or source[start - 1] == "_"):
                start -= 1
            while end < len(source) and (source[end].isalnum() or source[end] == "_"):
                end += 1
            if source[start:end] in _COLLECTIVE_NAMES:
                return True
            at = source.find(text, end)
    return False


def may_call_collectives(scope: CellScope) -> bool:
    """Whether a call in this cell can name a collective of OUTPUT_ARGUMENT: its text holds one of their names as a
    name, or an earlier cell bound a short name to one (``from torch.distributed import all_reduce as ar``), and a
    statement's value is a call that may be one (:func:`_collective_statement`, asked of those only). Most files call
    none, and the look back of `reduced_before` at every ``if`` and read is then skipped."""
    found = scope.memo.get("may_call_collectives")
    if found is None:
        source = scope.source
        found = scope.memo["may_call_collectives"] = (_names_a_collective(source) or any(
            target in OUTPUT_ARGUMENT for target in scope.aliases.values()
        )) and _collective_statement(scope.tree, scope.aliases)
    return found


def _collective_statement(tree: ast.AST, aliases: dict[str, str]) -> bool:
    """Whether an expression statement or an assignment of the cell (what `reduced_before` looks back through) has
    for its value a call that may be a collective of OUTPUT_ARGUMENT: ``x.all_reduce(...)`` by its attribute's name,
    ``ar(...)`` of a name imported as one (what `collective_output` can take; most texts that name one, in a
    docstring or as ``functools.reduce``, make no such call)."""
    for statement in statements(tree):
        if type(statement) is ast.Expr or type(statement) is ast.Assign:
            call = statement.value  # type: ignore[attr-defined]
            if type(call) is ast.Call:
                func = call.func
                if type(func) is ast.Attribute:
                    if func.attr in _COLLECTIVE_NAMES:  # type: ignore[attr-defined]
                        return True
                elif type(func) is ast.Name and aliases.get(func.id) in OUTPUT_ARGUMENT:  # type: ignore[attr-defined]
                    return True
    return False


def reduced_before(node: ast.AST, name: str, scope: CellScope) -> ast.Call | None:
    """The collective that last wrote ``name`` before the statement holding
    ``node``, in its block or an enclosing one (``if rank == 0: print(t.item())`` after
    ``dist.all_reduce(t)``); None when ``name`` was bound otherwise in between."""
    if not may_call_collectives(scope):
        return None
    statement = statement_of(node, scope)
    while statement is not None:
        block, index = scope.siblings(statement)
        for earlier in reversed(block[max(0, index - LOOK_BACK):index]):
            call = earlier.value if isinstance(earlier, (ast.Expr, ast.Assign)) else None
            found = collective_output(call, scope, asynchronous=True) if call is not None else None
            if found is not None and found[1] == name:
                return call  # type: ignore[return-value]
            if _writes(earlier, name):
                return None
        parent = scope.parent(statement)
        if isinstance(parent, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)) or parent is None:
            return None
        statement = statement_of(parent, scope)
    return None


def reads_of(names: set[str], statements: list[ast.stmt], scope: CellScope) -> Iterator[tuple[str, ast.Call]]:
    """Host reads (`host_read`) of ``names`` in ``statements``, nested ones included."""
    for statement in statements:
        for node in ast.walk(statement):
            read = host_read(node, scope) if type(node) is ast.Call else None
            if read is None:
                continue
            for name in scope.names_in(read):
                if name in names:
                    yield name, node  # type: ignore[misc]
                    break
